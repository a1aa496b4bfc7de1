#include "tierkv/fidelity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace tierkv::engine {
namespace {

TEST(FidelityTest, IdenticalRowsAgreeAndDifferentRowsAreMeasured) {
  const std::vector<float> a = {1, 2, 3, 0, 0, 5};  // 2 rows of 3
  Fidelity same;
  same.Add(a, a, 3);
  EXPECT_EQ(same.rows, 2u);
  EXPECT_DOUBLE_EQ(same.max_abs_logit_diff, 0);
  EXPECT_DOUBLE_EQ(same.top1_agree(), 1.0);
  EXPECT_NEAR(same.kl_mean(), 0, 1e-12);
  // Row 1 flips its top token; row 0 is shifted by a constant (same distribution).
  const std::vector<float> b = {2, 3, 4, 6, 0, 5};
  Fidelity f;
  f.Add(a, b, 3);
  EXPECT_DOUBLE_EQ(f.max_abs_logit_diff, 6);
  EXPECT_DOUBLE_EQ(f.top1_agree(), 0.5);
  // KL of row 0 is 0; of row 1: p = softmax(0,0,5), q = softmax(6,0,5).
  auto sm = [](std::vector<double> x) {
    double s = 0;
    for (double& v : x) s += (v = std::exp(v));
    for (double& v : x) v /= s;
    return x;
  };
  const auto p = sm({0, 0, 5}), q = sm({6, 0, 5});
  double kl = 0;
  for (int i = 0; i < 3; ++i) kl += p[i] * std::log(p[i] / q[i]);
  EXPECT_NEAR(f.kl_mean(), kl / 2, 1e-9);
}

}  // namespace
}  // namespace tierkv::engine

#include "select/profile.h"

#include <gtest/gtest.h>

#include <numeric>

namespace tierkv::select {
namespace {

double Mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

TEST(LayerRetentionTest, ProportionalToDensityWithTheRequestedMean) {
  // CaR's Figure 4 shape: sparsity rising from 60% to 95%.
  const std::vector<double> s = {0.60, 0.80, 0.90, 0.95};
  const std::vector<double> r = LayerRetention(s, 0.2);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_NEAR(Mean(r), 0.2, 1e-12);
  // density 0.40 : 0.20 : 0.10 : 0.05, total 0.75, budget 0.8
  EXPECT_NEAR(r[0], 0.8 * 0.40 / 0.75, 1e-12);
  EXPECT_NEAR(r[3], 0.8 * 0.05 / 0.75, 1e-12);
  for (size_t l = 1; l < r.size(); ++l) EXPECT_LT(r[l], r[l - 1]);  // sparser keeps fewer
}

TEST(LayerRetentionTest, AFullLayerGivesItsShareToTheOthers) {
  const std::vector<double> s = {0.0, 0.9, 0.9};
  const std::vector<double> r = LayerRetention(s, 0.5);
  // Proportional would give layer 0 1.25: it keeps everything, and the other
  // two share the remaining 0.5 equally.
  EXPECT_EQ(r[0], 1.0);
  EXPECT_NEAR(r[1], 0.25, 1e-12);
  EXPECT_NEAR(r[2], 0.25, 1e-12);
  EXPECT_NEAR(Mean(r), 0.5, 1e-12);
}

TEST(LayerRetentionTest, EdgeCases) {
  EXPECT_TRUE(LayerRetention({}, 0.5).empty());
  for (double x : LayerRetention({0.3, 0.99, 1.0}, 1.0)) EXPECT_EQ(x, 1.0);
  // Uniform sparsity: uniform retention.
  for (double x : LayerRetention({0.7, 0.7, 0.7, 0.7}, 0.25)) EXPECT_NEAR(x, 0.25, 1e-12);
  // A layer with no measured density still keeps a little.
  const std::vector<double> r = LayerRetention({1.0, 0.5}, 0.3);
  EXPECT_GT(r[0], 0.0);
  EXPECT_NEAR(Mean(r), 0.3, 1e-12);
}

}  // namespace
}  // namespace tierkv::select

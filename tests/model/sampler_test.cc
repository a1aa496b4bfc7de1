#include <gtest/gtest.h>

#include <cmath>

#include "tierkv/generate.h"

namespace tierkv {
namespace {

TEST(SamplerTest, GreedyIsArgmax) {
  Sampler s({0.0f, 1.0f, 0});
  std::vector<float> l = {0.1f, 3.0f, -1.0f, 2.9f};
  EXPECT_EQ(s.Sample(l), 1);
}

TEST(SamplerTest, TemperatureSamplingFollowsSoftmaxAndIsSeeded) {
  std::vector<float> l = {0.0f, std::log(3.0f)};  // p = 0.25, 0.75 at T = 1
  Sampler a({1.0f, 1.0f, 42}), b({1.0f, 1.0f, 42});
  int ones = 0;
  for (int i = 0; i < 4000; ++i) {
    const int x = a.Sample(l);
    EXPECT_EQ(x, b.Sample(l));
    ones += x;
  }
  EXPECT_NEAR(ones / 4000.0, 0.75, 0.03);
}

TEST(SamplerTest, TopPKeepsOnlyTheNucleus) {
  std::vector<float> l = {5.0f, 0.0f, 0.0f, 0.0f};  // token 0 holds ~98% of the mass
  Sampler s({1.0f, 0.5f, 7});
  for (int i = 0; i < 200; ++i) EXPECT_EQ(s.Sample(l), 0);
}

TEST(SamplerTest, OptionsAreValidated) {
  GenerateOptions o;
  o.sampler.top_p = 0.0f;
  EXPECT_FALSE(ValidateGenerateOptions(o).ok());
  o.sampler.top_p = 1.0f;
  o.sampler.temperature = -1.0f;
  EXPECT_FALSE(ValidateGenerateOptions(o).ok());
  o.sampler.temperature = 0.5f;
  EXPECT_TRUE(ValidateGenerateOptions(o).ok());
}

}  // namespace
}  // namespace tierkv

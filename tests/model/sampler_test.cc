#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

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

// The nucleus without a full sort draws what a full sort would: the same
// token for the same seed, draw after draw, on a 32k-entry vocabulary; with
// top_p = 1 the draw walks the ids in order (no ranking at all).
TEST(SamplerTest, TopPDrawsWhatAFullSortDraws) {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.f, 3.f);
  std::vector<float> l(32000);
  for (float& x : l) x = d(rng);
  for (float top_p : {0.05f, 0.5f, 0.9f, 0.999f, 1.0f}) {
    Sampler fast({0.8f, top_p, 11});
    uint64_t state = 11;
    auto next = [&state] {  // the sampler's splitmix64
      uint64_t z = (state += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      return z ^ (z >> 31);
    };
    const float mx = *std::max_element(l.begin(), l.end());
    std::vector<std::pair<float, int>> p(l.size());
    double sum = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      p[i] = {std::exp((l[i] - mx) / 0.8f), static_cast<int>(i)};
      sum += p[i].first;
    }
    // top_p = 1 draws over every id in id order; below it over the nucleus, largest first.
    if (top_p < 1.0f) std::sort(p.begin(), p.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    size_t keep = p.size();
    double mass = 0, kept = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      mass += p[i].first / sum;
      if (top_p < 1.0f && mass >= top_p) {
        keep = i + 1;
        break;
      }
    }
    for (size_t i = 0; i < keep; ++i) kept += p[i].first;
    for (int draw = 0; draw < 200; ++draw) {
      const double u = (next() >> 11) * (1.0 / 9007199254740992.0) * kept;
      double acc = 0;
      int want = p[keep - 1].second;
      for (size_t i = 0; i < keep; ++i) {
        acc += p[i].first;
        if (u < acc) {
          want = p[i].second;
          break;
        }
      }
      ASSERT_EQ(fast.Sample(l), want) << "top_p " << top_p << " draw " << draw << " (nucleus of " << keep << ")";
    }
  }
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

#include "select/importance.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace tierkv::select {
namespace {

TEST(ImportanceTest, TopKPicksTheLargestWithLowIndexTies) {
  std::vector<float> s = {0.1f, 0.5f, 0.5f, 0.9f, 0.0f};
  EXPECT_EQ(TopK(s, 2), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(TopK(s, 3), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(TopK(s, 10).size(), 5u);
  EXPECT_TRUE(TopK(s, 0).empty());
}

TEST(ImportanceTest, TopGroupsTakesWholeGroupsBySummedScore) {
  // Groups {0,1}, {2,3}, {4,5}, {6}: sums 1.1, 5, 0.2, 3.
  const std::vector<float> s = {1.0f, 0.1f, 2.0f, 3.0f, 0.1f, 0.1f, 3.0f};
  const std::vector<uint32_t> g = {0, 0, 1, 1, 2, 2, 3};
  EXPECT_EQ(TopGroups(s, g, 1), (std::vector<int32_t>{2, 3}));        // one group, at least k rows
  EXPECT_EQ(TopGroups(s, g, 3), (std::vector<int32_t>{2, 3, 6}));
  EXPECT_EQ(TopGroups(s, g, 4), (std::vector<int32_t>{0, 1, 2, 3, 6}));  // at most a group more
  EXPECT_EQ(TopGroups(s, g, 100).size(), 7u);
  EXPECT_TRUE(TopGroups(s, g, 0).empty());
  // Groups need not be contiguous (a page of an importance-ordered layout),
  // and ties go to the lower id.
  const std::vector<uint32_t> scattered = {1, 0, 1, 0, 2, 2, 3};
  const std::vector<float> flat(7, 1.0f);
  EXPECT_EQ(TopGroups(flat, scattered, 2), (std::vector<int32_t>{1, 3}));
  // Single-row groups are TopK.
  std::vector<uint32_t> one(7);
  for (uint32_t i = 0; i < 7; ++i) one[i] = i;
  EXPECT_EQ(TopGroups(s, one, 3), TopK(s, 3));
}

TEST(ImportanceTest, MaxPoolTakesTheLargestWithinTheRadius) {
  const std::vector<float> s = {0, 5, 0, 0, 0, 0, 1, 0, 9};
  EXPECT_EQ(MaxPool(s, 0), s);
  EXPECT_EQ(MaxPool(s, 1), (std::vector<float>{5, 5, 5, 0, 0, 1, 1, 9, 9}));
  EXPECT_EQ(MaxPool(s, 2), (std::vector<float>{5, 5, 5, 5, 1, 1, 9, 9, 9}));
  EXPECT_EQ(MaxPool(s, 100), std::vector<float>(s.size(), 9));
  EXPECT_TRUE(MaxPool(std::vector<float>{}, 3).empty());
  // Against the definition on random scores and radii.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> v(1 + rng() % 200);
    for (float& x : v) x = static_cast<float>(rng() % 1000);
    const size_t r = rng() % 20;
    const std::vector<float> got = MaxPool(v, r);
    for (size_t j = 0; j < v.size(); ++j) {
      const size_t lo = j >= r ? j - r : 0, hi = std::min(v.size() - 1, j + r);
      EXPECT_EQ(got[j], *std::max_element(v.begin() + lo, v.begin() + hi + 1)) << j << " r=" << r;
    }
  }
  // A value right after a key the query attends ranks with the key.
  const std::vector<float> needle = {0.1f, 0.1f, 3.0f, 0.2f, 0.2f, 0.2f, 0.1f, 0.1f};
  EXPECT_EQ(TopK(MaxPool(needle, 3), 4), (std::vector<int32_t>{0, 1, 2, 3}));  // ties: the lower index
  EXPECT_EQ(TopK(MaxPool(needle, 3), 6), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
}

TEST(ImportanceTest, MaxPoolWindowCarriesAKeyOntoTheRowsAfterIt) {
  const std::vector<float> s = {0, 5, 0, 0, 0, 0, 1, 0, 9};
  EXPECT_EQ(MaxPoolWindow(s, 0, 0), s);
  EXPECT_EQ(MaxPoolWindow(s, 2, 2), MaxPool(s, 2));
  EXPECT_EQ(MaxPoolWindow(s, 2, 0), (std::vector<float>{0, 5, 5, 5, 0, 0, 1, 1, 9}));
  EXPECT_EQ(MaxPoolWindow(s, 0, 1), (std::vector<float>{5, 5, 0, 0, 0, 1, 1, 9, 9}));
  std::mt19937 rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> v(1 + rng() % 200);
    for (float& x : v) x = static_cast<float>(rng() % 1000);
    const size_t b = rng() % 20, a = rng() % 20;
    const std::vector<float> got = MaxPoolWindow(v, b, a);
    for (size_t j = 0; j < v.size(); ++j) {
      const size_t lo = j >= b ? j - b : 0, hi = std::min(v.size() - 1, j + a);
      EXPECT_EQ(got[j], *std::max_element(v.begin() + lo, v.begin() + hi + 1)) << j << " b=" << b << " a=" << a;
    }
  }
  // Carried forward, the key's whole value (the 4 rows after it) ranks with
  // the key, and nothing before the key does.
  const std::vector<float> needle = {0.3f, 0.3f, 3.0f, 0.2f, 0.2f, 0.2f, 0.2f, 0.1f};
  EXPECT_EQ(TopK(MaxPoolWindow(needle, 4, 0), 5), (std::vector<int32_t>{2, 3, 4, 5, 6}));
}

TEST(ImportanceTest, CountsJaccardAndMass) {
  EXPECT_EQ(CountForFraction(100, 0.1), 10u);
  EXPECT_EQ(CountForFraction(101, 0.1), 11u);
  EXPECT_EQ(CountForFraction(3, 0.01), 1u);
  EXPECT_EQ(CountForFraction(0, 0.5), 0u);
  EXPECT_DOUBLE_EQ(Jaccard(std::vector<int32_t>{1, 2, 3}, std::vector<int32_t>{2, 3, 4}), 0.5);
  EXPECT_DOUBLE_EQ(Jaccard(std::vector<int32_t>{}, std::vector<int32_t>{}), 1.0);
  EXPECT_DOUBLE_EQ(MeanPairwiseJaccard({{1, 2}, {1, 2}, {3, 4}}), (1.0 + 0 + 0) / 3);
  std::vector<float> s = {4, 3, 2, 1};
  EXPECT_DOUBLE_EQ(TopMassFraction(s, 1), 0.4);
  EXPECT_DOUBLE_EQ(TopMassFraction(s, 4), 1.0);
}

TEST(ImportanceTest, RandomSetsMeetTheExpectedJaccard) {
  // Brute force: two random 25% subsets of 400 items.
  std::mt19937 rng(1);
  std::vector<float> a(400), b(400);
  double sum = 0;
  for (int t = 0; t < 2000; ++t) {
    for (auto& x : a) x = static_cast<float>(rng());
    for (auto& x : b) x = static_cast<float>(rng());
    sum += Jaccard(TopK(a, 100), TopK(b, 100));
  }
  EXPECT_NEAR(sum / 2000, RandomJaccard(0.25), 0.005);
}

}  // namespace
}  // namespace tierkv::select

// Probe-head identification against a brute-force reference written from the
// definitions (full sorts, std::set intersections, explicit vote counts), on
// random score matrices with many ties.
#include "select/identify.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "select/identify_reference.h"
#include "select/probe_fit.h"
#include "select/importance.h"
#include "testing/status_matchers.h"

namespace tierkv::select {
namespace {

using Scores = std::vector<std::vector<float>>;
using testing::Reference;
using testing::RefDecision;

TEST(IdentifyTest, DecisionsEqualTheBruteForceReference) {
  std::mt19937 rng(11);
  int used = 0, fell_back = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const size_t n = 1 + rng() % 300;
    const int probes = 1 + static_cast<int>(rng() % 4);
    const double retention = std::vector<double>{0.05, 0.1, 0.25, 0.5, 1.0}[rng() % 5];
    const double alpha = std::vector<double>{0.0, 0.3, 0.6, 1.0}[rng() % 4];
    const Aggregation agg = rng() % 2 ? Aggregation::kSum : Aggregation::kVote;
    // Correlated heads (a shared component plus noise), quantised so that ties occur.
    const double share = (rng() % 100) / 100.0;
    std::vector<float> common(n);
    for (auto& x : common) x = static_cast<float>(rng() % 1000) / 1000.0f;
    Scores s(probes, std::vector<float>(n));
    for (auto& h : s) {
      for (size_t j = 0; j < n; ++j) {
        const double own = static_cast<double>(rng() % 1000) / 1000.0;
        h[j] = std::round(static_cast<float>(share * common[j] + (1 - share) * own) * 64) / 64;
      }
    }
    IdentifyOptions o;
    o.retention = retention;
    o.alpha = alpha;
    o.aggregation = agg;
    const ProbeDecision d = DecideWithProbes(s, o);
    const RefDecision r = Reference(s, retention, alpha, agg);
    SCOPED_TRACE("trial " + std::to_string(trial));
    ASSERT_EQ(d.k, r.k);
    ASSERT_EQ(d.probe_sets, r.sets);
    ASSERT_NEAR(d.jaccard, r.jaccard, 1e-12);
    ASSERT_NEAR(d.threshold, r.threshold, 1e-12);
    ASSERT_EQ(d.use_probes, r.use);
    ASSERT_EQ(d.selected, r.selected);
    (d.use_probes ? used : fell_back)++;
  }
  // Both branches were exercised.
  EXPECT_GT(used, 300);
  EXPECT_GT(fell_back, 300);
}

TEST(IdentifyTest, ThresholdFollowsTheRandomJaccard) {
  // n = 100, k = 25: j = 0.25 / 1.75 = 1/7; t = (1/7)^0.6.
  Scores s(3, std::vector<float>(100));
  for (int h = 0; h < 3; ++h) {
    for (int j = 0; j < 100; ++j) s[h][j] = static_cast<float>((j * (h + 1) * 37) % 100);
  }
  const ProbeDecision d = DecideWithProbes(s, IdentifyOptions{});
  EXPECT_EQ(d.k, 25u);
  EXPECT_NEAR(d.random_jaccard, 1.0 / 7, 1e-12);
  EXPECT_NEAR(d.threshold, std::pow(1.0 / 7, 0.6), 1e-12);
  // Identical heads agree perfectly: J = 1 >= t, and the set is theirs.
  Scores same(3, s[0]);
  const ProbeDecision e = DecideWithProbes(same, IdentifyOptions{});
  EXPECT_TRUE(e.use_probes);
  EXPECT_DOUBLE_EQ(e.jaccard, 1.0);
  EXPECT_EQ(e.selected, TopK(s[0], 25));
}

// A fitted threshold of 0 is met by any agreement: the probes decide, with
// the set a tiny positive threshold gives, and their Jaccard is not measured.
TEST(IdentifyTest, AZeroThresholdDecidesWithoutMeasuringAgreement) {
  Scores s(3, std::vector<float>(100));
  for (int h = 0; h < 3; ++h) {
    for (int j = 0; j < 100; ++j) s[h][j] = static_cast<float>((j * (h + 1) * 37) % 100);
  }
  const ProbeDecision zero = DecideWithProbes(s, IdentifyOptions{}, 0.0);
  const ProbeDecision tiny = DecideWithProbes(s, IdentifyOptions{}, 1e-9);
  EXPECT_TRUE(zero.use_probes);
  EXPECT_TRUE(tiny.use_probes);
  EXPECT_TRUE(std::isnan(zero.jaccard));
  EXPECT_TRUE(zero.probe_sets.empty());
  EXPECT_EQ(tiny.probe_sets.size(), 3u);
  EXPECT_EQ(zero.selected, tiny.selected);
  EXPECT_EQ(zero.summed, tiny.summed);
  // kNeverProbes still falls back.
  EXPECT_FALSE(DecideWithProbes(s, IdentifyOptions{}, kNeverProbes).use_probes);
}

TEST(IdentifyTest, GqaSumsQueryHeadsAndRecallCounts) {
  const Scores q = {{1, 0, 2}, {0, 1, 1}, {5, 5, 5}, {1, 1, 0}};
  const Scores kv = KvHeadScores(q, 2);
  ASSERT_EQ(kv.size(), 2u);
  EXPECT_EQ(kv[0], (std::vector<float>{1, 1, 3}));
  EXPECT_EQ(kv[1], (std::vector<float>{6, 6, 5}));
  EXPECT_EQ(KvHeadScores(q, 1), q);  // MHA
  EXPECT_DOUBLE_EQ(Recall(std::vector<int32_t>{1, 2, 5}, std::vector<int32_t>{2, 3, 5, 9}), 0.5);
  EXPECT_DOUBLE_EQ(Recall(std::vector<int32_t>{}, std::vector<int32_t>{}), 1.0);
}

TEST(IdentifyTest, OptionsAreValidated) {
  IdentifyOptions o;
  EXPECT_OK(o.Validate());
  o.retention = 0;
  EXPECT_FALSE(o.Validate().ok());
  o.retention = 1.5;
  EXPECT_FALSE(o.Validate().ok());
  o.retention = 0.5;
  o.alpha = -1;
  EXPECT_FALSE(o.Validate().ok());
  EXPECT_FALSE(ParseAggregation("max").ok());
  ASSERT_OK_AND_ASSIGN(Aggregation a, ParseAggregation("vote"));
  EXPECT_EQ(a, Aggregation::kVote);
}

}  // namespace
}  // namespace tierkv::select

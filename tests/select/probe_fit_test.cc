// The fitted probe threshold (--alpha auto): a layer whose samples keep the
// target recall is always decided by its probes, one where none does always
// falls back, and in between the threshold keeps the decided samples' mean
// recall at the target.
#include <gtest/gtest.h>

#include <cmath>

#include "select/importance.h"
#include "select/probe_fit.h"

namespace tierkv::select {
namespace {

TEST(ProbeFitTest, ThresholdKeepsTheDecidedSamplesAtTheTargetRecall) {
  // Every sample reaches the target: the probes always decide.
  EXPECT_EQ(FitThreshold({{0.1, 0.9}, {0.2, 0.85}}, 0.8), 0.0);
  // None does, not even the best-agreeing: never.
  EXPECT_TRUE(std::isinf(FitThreshold({{0.1, 0.3}, {0.5, 0.7}}, 0.8)));
  EXPECT_TRUE(std::isinf(FitThreshold({}, 0.8)));
  // Recall rises with agreement: the threshold is the lowest J of the
  // largest high-J group whose mean reaches the target (0.9, 0.8, 0.7 -> 0.8).
  const double t = FitThreshold({{0.1, 0.2}, {0.3, 0.7}, {0.5, 0.8}, {0.7, 0.9}}, 0.8);
  EXPECT_DOUBLE_EQ(t, 0.3);
  // Deciding by that threshold: the decided samples' mean recall is 0.8.
  // A dip among high-J samples does not stop the search while the mean holds.
  EXPECT_DOUBLE_EQ(FitThreshold({{0.9, 1.0}, {0.8, 0.65}, {0.6, 0.8}, {0.2, 0.1}}, 0.8), 0.6);
}

TEST(ProbeFitTest, MassRecallWeighsMissedRowsByTheirImportance) {
  const std::vector<float> s = {5, 4, 1, 0.5f, 0.1f};
  // The best 2 rows hold 9; a set of rows 0 and 2 holds 6.
  EXPECT_DOUBLE_EQ(MassRecall(std::vector<int32_t>{0, 2}, s, 2), 6.0 / 9.0);
  EXPECT_DOUBLE_EQ(MassRecall(TopK(s, 3), s, 3), 1.0);
  // A larger set never counts above 1; nothing to hold counts as kept.
  EXPECT_DOUBLE_EQ(MassRecall(std::vector<int32_t>{0, 1, 2}, s, 2), 1.0);
  EXPECT_DOUBLE_EQ(MassRecall(std::vector<int32_t>{}, std::vector<float>(3, 0.0f), 2), 1.0);
}

TEST(ProbeFitTest, HeadMassRecallMeasuresTheSharedSetAgainstEachHeadsOwnBest) {
  // Head 0 attends to rows 0-1, head 1 to rows 2-3: the heads' sum ranks
  // rows 0 and 1 first (they hold more), so a shared set {0, 1} keeps all of
  // the summed mass a 2-row set can hold but misses head 1 entirely.
  const std::vector<std::vector<float>> heads = {{5, 4, 0, 0}, {0, 0, 3, 3}};
  const std::vector<float> sum = {5, 4, 3, 3};
  const std::vector<int32_t> shared = {0, 1};
  EXPECT_DOUBLE_EQ(MassRecall(shared, sum, 2), 1.0);
  EXPECT_DOUBLE_EQ(HeadMassRecall(shared, heads, 2), 0.5);  // (9/9 + 0/6) / 2
  // One row of each head's best: each keeps its share of its own best pair.
  EXPECT_DOUBLE_EQ(HeadMassRecall(std::vector<int32_t>{0, 2}, heads, 2), (5.0 / 9 + 3.0 / 6) / 2);
  EXPECT_DOUBLE_EQ(HeadMassRecall(shared, {}, 2), 1.0);
}

}  // namespace
}  // namespace tierkv::select

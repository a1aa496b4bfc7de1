// The read planner's rules without a store: row blocks, merged reads, a
// record's reads and the predicted cost that picks a reordered run.
#include "store/read_plan.h"

#include <gtest/gtest.h>

#include "store/format.h"

namespace tierkv::store {
namespace {

using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;

TEST(ReadPlanTest, MergedRunsReadThroughGapsUpToTheLimitOnly) {
  const std::vector<uint64_t> blocks = {1, 2, 4, 8};
  EXPECT_EQ(MergedRuns(blocks, 0), (Ranges{{1, 3}, {4, 5}, {8, 9}}));
  EXPECT_EQ(MergedRuns(blocks, 1), (Ranges{{1, 5}, {8, 9}}));  // the gap at 3 is read through
  EXPECT_EQ(MergedRuns(blocks, 3), (Ranges{{1, 9}}));
  EXPECT_TRUE(MergedRuns(std::vector<uint64_t>{}, 4).empty());
  // Keys of two records never merge, whatever the gap.
  const std::set<uint64_t> two = {uint64_t{0} << 32 | 5, uint64_t{1} << 32 | 1};
  EXPECT_EQ(MergedRuns(two, 1000).size(), 2u);
}

TEST(ReadPlanTest, RowBlocksAreKThenVAfterTheHeader) {
  // 64 rows of 256 bytes: 16 rows per page; K in pages 0-3, V in pages 4-7.
  std::set<uint64_t> b;
  AddRowBlocks(0, 0, 64, 256, true, false, &b);
  AddRowBlocks(0, 17, 64, 256, true, true, &b);
  EXPECT_EQ(b, (std::set<uint64_t>{1, 2, 1 + 4 + 1}));
  std::set<uint64_t> v;
  AddRowBlocks(3, 63, 64, 256, false, true, &v);
  EXPECT_EQ(v, (std::set<uint64_t>{uint64_t{3} << 32 | 8}));
}

TEST(ReadPlanTest, RecordReadsSkipAKnownHeaderAndCountPayloadPages) {
  const std::vector<bool> pages = {true, false, true, true, false, false, true};
  const Ranges cold = RecordReads(pages, false, 0);
  EXPECT_EQ(cold, (Ranges{{0, 2}, {3, 5}, {7, 8}}));  // header and page 0 in one read
  EXPECT_EQ(PayloadPagesOf(cold), 4u);
  const Ranges warm = RecordReads(pages, true, 1);
  EXPECT_EQ(warm, (Ranges{{1, 5}, {7, 8}}));  // page 1 read through
  EXPECT_EQ(PayloadPagesOf(warm), 5u);
  EXPECT_TRUE(RecordReads(std::vector<bool>(4, false), true, 8).empty());
}

TEST(ReadPlanTest, PredictedCostPrefersFewerReadsWhenReadsAreDear) {
  IoCostModel m;
  m.per_io_us = 100;
  m.mb_per_s = 1000;
  // Eight rows on every other page against the same rows packed in one.
  std::set<uint64_t> scattered, packed;
  for (uint32_t i = 0; i < 8; ++i) {
    AddRowBlocks(0, i * 32, 256, 256, true, false, &scattered);
    AddRowBlocks(0, i, 256, 256, true, false, &packed);
  }
  EXPECT_EQ(scattered.size(), 8u);
  EXPECT_EQ(packed.size(), 1u);
  const double s = PredictedSeconds(scattered, 0, m), p = PredictedSeconds(packed, 0, m);
  EXPECT_NEAR(s, 8 * 100e-6 + 8 * kBlockSize / 1e9, 1e-12);
  EXPECT_LT(p, s);
  // Reading through the one-page gaps makes them one read of 15 pages.
  EXPECT_NEAR(PredictedSeconds(scattered, 1, m), 100e-6 + 15 * kBlockSize / 1e9, 1e-12);
}

}  // namespace
}  // namespace tierkv::store

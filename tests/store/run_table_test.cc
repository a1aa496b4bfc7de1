// RunTable without a store: runs under each of their chunks, the totals,
// removal by any chunk, and compaction's replacement.
#include "store/run_table.h"

#include <gtest/gtest.h>

namespace tierkv::store {
namespace {

std::shared_ptr<const Run> MakeRun(std::vector<uint32_t> chunks, uint64_t bytes) {
  auto r = std::make_shared<Run>();
  r->chunks = std::move(chunks);
  r->bytes = bytes;
  return r;
}

TEST(RunTableTest, InstallFindsTheRunUnderEachChunk) {
  RunTable t;
  EXPECT_EQ(t.Of(1), nullptr);
  auto a = MakeRun({1, 2, 3}, 300);
  auto b = MakeRun({7}, 50);
  t.Install(a);
  t.Install(b);
  EXPECT_EQ(t.Of(1), a);
  EXPECT_EQ(t.Of(3), a);
  EXPECT_EQ(t.Of(7), b);
  EXPECT_EQ(t.Of(4), nullptr);
  EXPECT_EQ(t.chunks(), 4u);
  EXPECT_EQ(t.bytes(), 350u);
  EXPECT_EQ(t.Runs().size(), 2u);  // each run once, not once per chunk
}

TEST(RunTableTest, RemoveByAnyChunkTakesTheWholeRun) {
  RunTable t;
  auto a = MakeRun({1, 2, 3}, 300);
  t.Install(a);
  t.Install(MakeRun({9}, 10));
  EXPECT_EQ(t.Remove(2), a);
  for (uint32_t c : {1u, 2u, 3u}) EXPECT_EQ(t.Of(c), nullptr) << c;
  EXPECT_EQ(t.chunks(), 1u);
  EXPECT_EQ(t.bytes(), 10u);
  EXPECT_EQ(t.Remove(2), nullptr);  // already gone: nothing changes
  EXPECT_EQ(t.bytes(), 10u);
}

TEST(RunTableTest, ReplaceOnlyWhileTheOldRunIsInstalled) {
  RunTable t;
  auto a = MakeRun({1, 2}, 200);
  t.Install(a);
  auto moved = std::make_shared<store::Run>(*a);  // compaction's copy: records elsewhere
  moved->where.push_back(ChunkStore::Location{5, 8});
  EXPECT_TRUE(t.Replace(a.get(), moved));
  EXPECT_EQ(t.Of(1), moved);
  EXPECT_EQ(t.Of(2), moved);
  EXPECT_EQ(t.chunks(), 2u);
  EXPECT_EQ(t.bytes(), 200u);
  // The old run was dropped meanwhile: its copy is not installed.
  auto again = std::make_shared<store::Run>(*a);
  EXPECT_FALSE(t.Replace(a.get(), again));
  EXPECT_EQ(t.Of(1), moved);
  t.Remove(1);
  EXPECT_FALSE(t.Replace(moved.get(), again));
  EXPECT_EQ(t.Of(1), nullptr);
  EXPECT_EQ(t.bytes(), 0u);
}

}  // namespace
}  // namespace tierkv::store

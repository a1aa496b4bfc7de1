// The read planner's cost model: measured once per cache directory and
// machine, kept in IO-MODEL, measured again when the file is from another
// machine or damaged; and the planner reads through the gaps it says are
// cheaper to read than to skip.
#include "store/io_model.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "store/chunk_store.h"
#include "store/kv_fixture.h"
#include "testing/status_matchers.h"

namespace tierkv::store {
namespace {

using testing::Prompt;
using testing::PromptKv;
using testing::TempDir;
using ::tierkv::testing::StatusIs;

constexpr uint32_t kRow = 256;   // 16 rows per 4 KiB page
constexpr uint32_t kChunk = 64;  // K: 4 pages, V: 4 pages

StoreOptions Options(const std::string& dir) {
  StoreOptions o;
  o.dir = dir;
  o.fingerprint = 0x10d3ULL;
  o.chunk_tokens = kChunk;
  o.layers = 1;
  o.row_bytes = kRow;
  return o;
}

std::string ModelPath(const std::string& dir) { return dir + "/" + kIoModelFile; }

// A saved model for this machine (as the store would measure it) with the
// given numbers.
void SaveModel(const std::string& dir, double per_io_us, double mb_per_s, std::string host = "") {
  StoreOptions o = Options(dir);
  ASSERT_OK(FileSystem::Default()->CreateDir(dir));
  ASSERT_OK_AND_ASSIGN(auto io, NewIoBackend(o.disk.io_backend, IoOptions{o.queue_depth}));
  ASSERT_OK_AND_ASSIGN(IoMachine here, MachineOf(dir, *io));
  IoCostModel m;
  m.machine = here;
  if (!host.empty()) m.machine.host = host;
  m.per_io_us = per_io_us;
  m.mb_per_s = mb_per_s;
  ASSERT_OK(WriteFileAtomically(FileSystem::Default(), ModelPath(dir), IoModelToText(m)));
}

TEST(IoModelTest, AFreshStoreMeasuresOnceThenReadsItBack) {
  TempDir dir;
  double per_io = 0, mbps = 0;
  {
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
    const IoCostModel& m = store->io_model();
    EXPECT_EQ(m.source, "measured");
    EXPECT_GE(m.per_io_us, 0.0);
    EXPECT_GT(m.mb_per_s, 0.0);
    per_io = m.per_io_us;
    mbps = m.mb_per_s;
    std::printf("measured: %.2f us per read, %.0f MB/s, merge gaps up to %u blocks\n", m.per_io_us,
                m.mb_per_s, m.MergeGapBlocks());
  }
  EXPECT_TRUE(std::filesystem::exists(ModelPath(dir.path())));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/" + kIoScratchFile));  // removed
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
  EXPECT_EQ(store->io_model().source, "saved");
  EXPECT_NEAR(store->io_model().per_io_us, per_io, 1e-3);
  EXPECT_NEAR(store->io_model().mb_per_s, mbps, 0.1);
}

TEST(IoModelTest, AModelFromAnotherMachineOrDamagedIsMeasuredAgain) {
  TempDir dir;
  SaveModel(dir.path(), 10, 100, "another-host");
  {
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
    EXPECT_EQ(store->io_model().source, "measured");
    EXPECT_NE(store->io_model().machine.host, "another-host");
  }
  ASSERT_OK_AND_ASSIGN(std::string text, ReadFileToString(FileSystem::Default(), ModelPath(dir.path())));
  EXPECT_EQ(text.find("another-host"), std::string::npos);  // replaced by this machine's
  ASSERT_OK(WriteFileAtomically(FileSystem::Default(), ModelPath(dir.path()), "tierkv-io-model 1\nhost"));
  {
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
    EXPECT_EQ(store->io_model().source, "measured");
  }
  // Not allowed to measure and nothing saved for this machine: the default.
  TempDir other;
  StoreOptions o = Options(other.path());
  o.disk.calibrate_io = false;
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));
  EXPECT_EQ(store->io_model().source, "default");
  EXPECT_FALSE(std::filesystem::exists(ModelPath(other.path())));
}

TEST(IoModelTest, TheParserNamesTheBadField) {
  IoCostModel m;
  m.machine = IoMachine{"h", "8:1", "uring", 32};
  m.per_io_us = 12.5;
  m.mb_per_s = 1500;
  ASSERT_OK_AND_ASSIGN(IoCostModel back, ParseIoModel(IoModelToText(m)));
  EXPECT_EQ(back.machine, m.machine);
  EXPECT_DOUBLE_EQ(back.per_io_us, 12.5);
  EXPECT_EQ(back.source, "saved");
  EXPECT_THAT(ParseIoModel("something else"), StatusIs(StatusCode::kCorruption, "first line"));
  EXPECT_THAT(ParseIoModel("tierkv-io-model 2\n"), StatusIs(StatusCode::kCorruption, "version"));
  std::string text = IoModelToText(m);
  EXPECT_THAT(ParseIoModel(text.substr(0, text.find("queue_depth"))),
              StatusIs(StatusCode::kCorruption, "queue_depth"));
  std::string bad = text;
  bad.replace(bad.find("1500.0"), 6, "-3");
  EXPECT_THAT(ParseIoModel(bad), StatusIs(StatusCode::kCorruption, "mb_per_s"));
  bad = text;
  bad.replace(bad.find("12.500"), 6, "x");
  EXPECT_THAT(ParseIoModel(bad), StatusIs(StatusCode::kCorruption, "per_io_us"));
  // The planner's rule: a gap is read through when its bytes cost less than a read.
  m.per_io_us = 10;
  m.mb_per_s = 1228.8;  // 4 KiB in 3.33 us
  EXPECT_EQ(m.MergeGapBlocks(), 3u);
  m.per_io_us = 0;
  EXPECT_EQ(m.MergeGapBlocks(), 0u);
  EXPECT_NEAR(m.Seconds(2, 1228800), 1e-3, 1e-9);
}

// Rows 0 and 48 of one chunk's K: pages 1 and 4 of the record (2 pages
// between). A disk where a read costs 3 pages' transfer reads them as one
// read of 4 pages; a disk where reads cost nothing extra reads 2 pages, and
// so does a store told not to merge gaps (--read-planner pages).
TEST(IoModelTest, ThePlannerReadsThroughGapsTheModelSaysAreCheaper) {
  for (const auto& [per_io, merge] : {std::pair{10.0, true}, {0.0, true}, {10.0, false}}) {
    TempDir dir;
    SaveModel(dir.path(), per_io, 1228.8);
    StoreOptions o = Options(dir.path());
    o.disk.merge_read_gaps = merge;
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));
    EXPECT_EQ(store->io_model().source, "saved");
    const std::vector<int32_t> p = Prompt(3, 0, kChunk);
    PromptKv kv(p, 1, kRow);
    ASSERT_OK(store->Put(p, kv.input).status());
    LookupResult m = store->Lookup(p);
    ASSERT_EQ(m.chunks.size(), 1u);
    std::vector<uint32_t> rows = {0, 48};
    std::string k(2 * kRow, '\0');
    RowRead r{m.chunks[0], m.prefix_hashes[0], 0, rows, k.data()};
    RowReadStats st;
    ASSERT_OK(store->ReadRows({&r, 1}, &st));
    ASSERT_OK(r.status);
    EXPECT_EQ(0, std::memcmp(k.data(), kv.k[0].data(), kRow));
    EXPECT_EQ(0, std::memcmp(k.data() + kRow, kv.k[0].data() + 48 * kRow, kRow));
    if (per_io > 0 && merge) {
      EXPECT_EQ(st.ios, 1u);
      EXPECT_EQ(st.bytes, 4u * kBlockSize);
    } else {
      EXPECT_EQ(st.ios, 2u);
      EXPECT_EQ(st.bytes, 2u * kBlockSize);
    }
  }
}

}  // namespace
}  // namespace tierkv::store

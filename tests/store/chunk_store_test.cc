#include "store/chunk_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "store/kv_fixture.h"
#include "store/manifest.h"
#include "testing/status_matchers.h"
#include "util/fault_injection_fs.h"

namespace tierkv::store {
namespace {

using ::tierkv::testing::StatusIs;
using testing::FlipByte;
using testing::Prompt;
using testing::TempDir;
using testing::PromptKv;
using Tokens = std::vector<int32_t>;

constexpr uint16_t kLayers = 3;
constexpr uint32_t kRow = 256;  // 16 tokens of K = one 4 KiB page
constexpr uint32_t kChunk = 16;

StoreOptions Options(const std::string& dir, FileSystem* fs = nullptr) {
  StoreOptions o;
  o.dir = dir;
  o.fs = fs;
  o.fingerprint = 0xfeedULL;
  o.chunk_tokens = kChunk;
  o.layers = kLayers;
  o.row_bytes = kRow;
  o.dtype = KvDtype::kF16;
  o.segment_bytes = 1 << 20;  // small, so tests roll over segments
  o.disk.direct_io = fs == nullptr;
  return o;
}

// Reads every chunk layer of the stored prefix of `tokens` and compares it
// with the fixture's bytes; returns the number of tokens verified.
size_t VerifyPrompt(ChunkStore& store, const Tokens& tokens, Status* first_error = nullptr) {
  LookupResult m = store.Lookup(tokens);
  PromptKv want(tokens, kLayers, kRow);
  std::vector<ChunkRead> reads;
  std::vector<std::string> k(m.chunks.size() * kLayers), v(m.chunks.size() * kLayers);
  for (size_t c = 0; c < m.chunks.size(); ++c) {
    for (uint16_t l = 0; l < kLayers; ++l) {
      size_t i = c * kLayers + l;
      k[i].resize(m.chunk_tokens[c] * kRow);
      v[i].resize(m.chunk_tokens[c] * kRow);
      reads.push_back(ChunkRead{m.chunks[c], m.prefix_hashes[c], l, k[i].data(), v[i].data()});
    }
  }
  EXPECT_OK(store.Read(reads));
  size_t verified = 0;
  for (size_t c = 0; c < m.chunks.size(); ++c) {
    size_t first = c * kChunk;
    for (uint16_t l = 0; l < kLayers; ++l) {
      size_t i = c * kLayers + l;
      if (!reads[i].status.ok()) {
        if (first_error && first_error->ok()) *first_error = reads[i].status;
        return verified;
      }
      size_t used = std::min<size_t>(m.chunk_tokens[c], m.matched_tokens - first);
      EXPECT_EQ(0, std::memcmp(k[i].data(), want.k[l].data() + first * kRow, used * kRow))
          << "chunk " << c << " layer " << l;
      EXPECT_EQ(0, std::memcmp(v[i].data(), want.v[l].data() + first * kRow, used * kRow))
          << "chunk " << c << " layer " << l;
    }
    verified = std::min<size_t>(m.matched_tokens, first + m.chunk_tokens[c]);
  }
  return verified;
}

class ChunkStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "uring" && !UringAvailable()) GTEST_SKIP() << "io_uring refused by the kernel";
  }
  StoreOptions Opts(const std::string& dir) {
    StoreOptions o = Options(dir);
    o.disk.io_backend = GetParam();
    return o;
  }
};

TEST_P(ChunkStoreTest, PutLookupReadRoundTripAndReopen) {
  TempDir dir;
  std::vector<Tokens> prompts;
  for (uint32_t i = 0; i < 12; ++i) prompts.push_back(Prompt(i, 40 + 3 * i, 60 + 11 * i));
  uint64_t written_chunks = 0;
  {
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Opts(dir.path())));
    for (const Tokens& p : prompts) {
      PromptKv kv(p, kLayers, kRow);
      ASSERT_OK_AND_ASSIGN(PutResult r, store->Put(p, kv.input));
      EXPECT_EQ(r.stored_tokens, p.size());
      written_chunks += r.new_chunks;
    }
    for (const Tokens& p : prompts) EXPECT_EQ(VerifyPrompt(*store, p), p.size());
    // A prompt sharing 45 tokens, then diverging: 32 verified (two whole chunks) + 13 inside the third.
    Tokens q = prompts[3];
    q.resize(45);
    q.push_back(9999);
    EXPECT_EQ(store->Lookup(q).matched_tokens, 45u);
    StoreStats s = store->stats();
    EXPECT_EQ(s.live_chunks, written_chunks);
    EXPECT_GT(s.segments, 1u);  // 1 MiB segments roll over
    EXPECT_EQ(s.corrupt_records, 0u);
  }
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Opts(dir.path())));
  EXPECT_EQ(store->stats().recovered_chunks, written_chunks);
  EXPECT_EQ(store->stats().skipped_records, 0u);
  for (const Tokens& p : prompts) EXPECT_EQ(VerifyPrompt(*store, p), p.size());
  // Storing again writes nothing.
  PromptKv kv(prompts[0], kLayers, kRow);
  ASSERT_OK_AND_ASSIGN(PutResult r, store->Put(prompts[0], kv.input));
  EXPECT_EQ(r.new_chunks, 0u);
}

// A flush drops every chunk, now and after a restart (also one written
// after the last checkpoint), and the store takes new prompts after it.
TEST_P(ChunkStoreTest, DropAllForgetsEveryChunkAcrossARestart) {
  TempDir dir;
  std::vector<Tokens> prompts;
  for (uint32_t i = 0; i < 6; ++i) prompts.push_back(Prompt(i, 0, 60 + 11 * i));  // nothing shared
  uint64_t removed_callbacks = 0;
  StoreOptions o = Opts(dir.path());
  o.on_chunk_removed = [&](uint64_t) { ++removed_callbacks; };
  {
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));
    uint64_t chunks = 0;
    for (const Tokens& p : prompts) {
      PromptKv kv(p, kLayers, kRow);
      ASSERT_OK_AND_ASSIGN(PutResult r, store->Put(p, kv.input));
      chunks += r.new_chunks;
    }
    ASSERT_OK_AND_ASSIGN(uint64_t dropped, store->DropAll());
    EXPECT_EQ(dropped, chunks);
    EXPECT_EQ(removed_callbacks, chunks);
    EXPECT_EQ(store->stats().live_chunks, 0u);
    EXPECT_EQ(store->stats().live_bytes, 0u);
    for (const Tokens& p : prompts) EXPECT_EQ(store->Lookup(p).matched_tokens, 0u);
    PromptKv kv(prompts[0], kLayers, kRow);
    ASSERT_OK_AND_ASSIGN(PutResult r, store->Put(prompts[0], kv.input));
    EXPECT_GT(r.new_chunks, 0u);
    EXPECT_EQ(VerifyPrompt(*store, prompts[0]), prompts[0].size());
  }
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Opts(dir.path())));
  EXPECT_EQ(VerifyPrompt(*store, prompts[0]), prompts[0].size()) << "stored after the flush";
  for (size_t i = 1; i < prompts.size(); ++i) EXPECT_EQ(store->Lookup(prompts[i]).matched_tokens, 0u);
}

TEST_P(ChunkStoreTest, BudgetEvictsLeafChunksOfTheOldestPrompts) {
  TempDir dir;
  StoreOptions o = Opts(dir.path());
  ChunkStore* raw = nullptr;
  const uint64_t per_chunk = kLayers * 3 * kBlockSize;  // header + K page + V page
  o.disk_budget_bytes = 10 * per_chunk;
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));
  raw = store.get();
  EXPECT_EQ(raw->record_bytes(kChunk) * kLayers, per_chunk);
  std::vector<Tokens> prompts;
  for (uint32_t i = 0; i < 6; ++i) prompts.push_back(Prompt(100 + i, 0, 48));  // 3 chunks each
  for (const Tokens& p : prompts) {
    PromptKv kv(p, kLayers, kRow);
    ASSERT_OK_AND_ASSIGN(PutResult r, store->Put(p, kv.input));
    EXPECT_EQ(r.stored_tokens, p.size());
    EXPECT_LE(store->stats().live_bytes, o.disk_budget_bytes);
  }
  // The newest three prompts are whole; the oldest lost chunks from their tails.
  for (size_t i = 3; i < 6; ++i) EXPECT_EQ(VerifyPrompt(*store, prompts[i]), 48u);
  EXPECT_LT(store->Lookup(prompts[0]).matched_tokens, 48u);
  EXPECT_GT(store->stats().evicted_chunks, 0u);
  // A prompt larger than the whole budget stores the prefix that fits.
  Tokens big = Prompt(999, 0, 16 * 20);
  PromptKv kv(big, kLayers, kRow);
  ASSERT_OK_AND_ASSIGN(PutResult r, store->Put(big, kv.input));
  EXPECT_EQ(r.stored_tokens, 160u);
  EXPECT_EQ(VerifyPrompt(*store, big), 160u);
}

// Eviction takes the least valuable chunk: a prompt read often keeps its
// chunks over newer prompts read once; with half-life 0 (pure recency) the
// same trace evicts it first.
TEST(ChunkStoreEvictionTest, OftenReadPromptOutlivesNewerOnesUnlessRecencyOnly) {
  for (uint32_t half_life : {4096u, 0u}) {
    SCOPED_TRACE("half-life " + std::to_string(half_life));
    TempDir dir;
    StoreOptions o = Options(dir.path());
    o.eviction_half_life = half_life;
    o.disk_budget_bytes = 10 * kLayers * 3 * kBlockSize;  // 10 chunks
    std::vector<uint64_t> removed;  // what the store tells its owner
    o.on_chunk_removed = [&](uint64_t h) { removed.push_back(h); };
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));
    std::vector<Tokens> prompts;
    for (uint32_t i = 0; i < 4; ++i) prompts.push_back(Prompt(300 + i, 0, 48));  // 3 chunks each
    PromptKv kv0(prompts[0], kLayers, kRow);
    ASSERT_OK(store->Put(prompts[0], kv0.input).status());
    for (int r = 0; r < 20; ++r) EXPECT_EQ(VerifyPrompt(*store, prompts[0]), 48u);
    for (size_t i = 1; i < 4; ++i) {
      PromptKv kv(prompts[i], kLayers, kRow);
      ASSERT_OK(store->Put(prompts[i], kv.input).status());
    }
    EXPECT_EQ(store->stats().evicted_chunks, 2u);
    if (half_life != 0) {
      EXPECT_EQ(store->Lookup(prompts[0]).matched_tokens, 48u);
      EXPECT_LT(store->Lookup(prompts[1]).matched_tokens, 48u);
    } else {
      EXPECT_EQ(store->Lookup(prompts[0]).matched_tokens, 16u);
      EXPECT_EQ(store->Lookup(prompts[1]).matched_tokens, 48u);
    }
    EXPECT_EQ(store->Lookup(prompts[3]).matched_tokens, 48u);
    // The owner heard of exactly the evicted chunks, none of them still stored.
    ASSERT_EQ(removed.size(), 2u);
    for (const Tokens& p : prompts) {
      for (uint64_t h : store->Lookup(p).prefix_hashes) {
        EXPECT_EQ(std::count(removed.begin(), removed.end(), h), 0);
      }
    }
  }
}

// A directory holding a file the store did not write is refused before the
// store writes anything into it (no LOCK, no identity file left behind).
TEST(ChunkStoreOpenTest, AForeignDirectoryIsRefusedUntouched) {
  testing::TempDir dir;
  { std::ofstream(dir.path() + "/notes.txt") << "mine"; }
  EXPECT_THAT(ChunkStore::Open(Options(dir.path())),
              StatusIs(StatusCode::kInvalidArgument, "did not write: notes.txt"));
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    left.push_back(e.path().filename().string());
  }
  EXPECT_EQ(left, std::vector<std::string>{"notes.txt"});
}

// A caller that holds only the rows after the stored prefix (first_row):
// Put writes the new chunks from them, and never a chunk that would need
// rows it was not given.
TEST(ChunkStorePutTest, FirstRowStoresOnlyWhatFollowsTheGivenRows) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
  const Tokens a = Prompt(1, 0, 48);
  PromptKv kva(a, kLayers, kRow);
  ASSERT_OK(store->Put(a, kva.input).status());
  Tokens b = a;
  const Tokens tail = Prompt(2, 0, 40);
  b.insert(b.end(), tail.begin(), tail.end());
  PromptKv kvb(b, kLayers, kRow);
  KvInput only_new;
  only_new.first_row = 48;
  for (uint16_t l = 0; l < kLayers; ++l) {
    only_new.k.push_back(std::span<const char>(kvb.k[l]).subspan(48 * kRow));
    only_new.v.push_back(std::span<const char>(kvb.v[l]).subspan(48 * kRow));
  }
  ASSERT_OK_AND_ASSIGN(PutResult r, store->Put(b, only_new));
  EXPECT_EQ(r.new_chunks, 3u);
  EXPECT_EQ(VerifyPrompt(*store, b), b.size());
  // c diverges from a at token 20: its first new chunk starts at 16 < 48.
  Tokens c(a.begin(), a.begin() + 20);
  c.insert(c.end(), tail.begin(), tail.end());
  PromptKv kvc(c, kLayers, kRow);
  KvInput late;
  late.first_row = 48;
  for (uint16_t l = 0; l < kLayers; ++l) {
    late.k.push_back(std::span<const char>(kvc.k[l]).subspan(48 * kRow));
    late.v.push_back(std::span<const char>(kvc.v[l]).subspan(48 * kRow));
  }
  ASSERT_OK_AND_ASSIGN(r, store->Put(c, late));
  EXPECT_EQ(r.new_chunks, 0u);
  EXPECT_EQ(r.stored_tokens, 20u);
  EXPECT_EQ(VerifyPrompt(*store, c), 20u);
  late.first_row = c.size() + 1;
  EXPECT_THAT(store->Put(c, late).status(), StatusIs(StatusCode::kInvalidArgument));
}

INSTANTIATE_TEST_SUITE_P(Backends, ChunkStoreTest, ::testing::Values("uring", "pread"),
                         [](const auto& info) { return info.param; });

// Failure-semantics rows: a flipped bit in a payload page or in the header,
// and a record copied over another's place, are Corruption on read; the
// chunk and its descendants leave the index; storing the prompt again heals it.
TEST(ChunkStoreCorruptionTest, BitFlipsAndMisplacedRecordsAreMissesNeverWrongKv) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
  Tokens p = Prompt(1, 0, 64);  // 4 chunks
  PromptKv kv(p, kLayers, kRow);
  ASSERT_OK(store->Put(p, kv.input).status());
  LookupResult m = store->Lookup(p);
  ASSERT_EQ(m.chunks.size(), 4u);

  struct Case {
    const char* name;
    std::function<void()> damage;
    size_t chunk;  // the damaged chunk index
  };
  auto loc = [&](size_t c, uint16_t l) { return store->TEST_location(store->Lookup(p).chunks[c], l); };
  std::vector<Case> cases = {
      {"payload bit", [&] {
         auto w = loc(2, 1);
         FlipByte(store->SegmentPath(w.segment), uint64_t{w.block} * kBlockSize + kBlockSize + 777);
       }, 2},
      {"header bit", [&] {
         auto w = loc(1, 0);
         FlipByte(store->SegmentPath(w.segment), uint64_t{w.block} * kBlockSize + 30);
       }, 1},
      {"record copied over another", [&] {
         auto a = loc(3, 2), b = loc(3, 1);  // layer 2's record where layer 1's was
         std::string seg_a = store->SegmentPath(a.segment), seg_b = store->SegmentPath(b.segment);
         std::ifstream in(seg_a, std::ios::binary);
         std::string rec(3 * kBlockSize, '\0');
         in.seekg(static_cast<std::streamoff>(uint64_t{a.block} * kBlockSize));
         in.read(rec.data(), static_cast<std::streamsize>(rec.size()));
         std::fstream out(seg_b, std::ios::in | std::ios::out | std::ios::binary);
         out.seekp(static_cast<std::streamoff>(uint64_t{b.block} * kBlockSize));
         out.write(rec.data(), static_cast<std::streamsize>(rec.size()));
       }, 3},
  };
  uint64_t corrupt = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    c.damage();
    Status err;
    size_t ok = VerifyPrompt(*store, p, &err);
    EXPECT_EQ(ok, c.chunk * kChunk);
    EXPECT_THAT(err, StatusIs(StatusCode::kCorruption));
    EXPECT_EQ(store->stats().corrupt_records, ++corrupt);
    // The damaged chunk and everything after it are gone from the index.
    EXPECT_EQ(store->Lookup(p).matched_tokens, c.chunk * kChunk);
    // Storing again rewrites them, and they read back exactly.
    ASSERT_OK_AND_ASSIGN(PutResult r, store->Put(p, kv.input));
    EXPECT_EQ(r.new_chunks, 4 - c.chunk);
    EXPECT_EQ(VerifyPrompt(*store, p), p.size());
  }
  // After a restart the damaged records are skipped or superseded, never served.
  store.reset();
  ASSERT_OK_AND_ASSIGN(store, ChunkStore::Open(Options(dir.path())));
  EXPECT_EQ(VerifyPrompt(*store, p), p.size());
}

TEST(ChunkStoreErrorsTest, BadDirectoriesAndBudgetsAreClearErrors) {
  TempDir dir;
  {
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
    Tokens p = Prompt(1, 0, 20);
    PromptKv kv(p, kLayers, kRow);
    ASSERT_OK(store->Put(p, kv.input).status());
  }
  StoreOptions other = Options(dir.path());
  other.fingerprint = 0xbeef;
  EXPECT_THAT(ChunkStore::Open(other),
              StatusIs(StatusCode::kInvalidArgument, "belongs to another model"));
  StoreOptions geometry = Options(dir.path());
  geometry.chunk_tokens = 32;
  EXPECT_THAT(ChunkStore::Open(geometry), StatusIs(StatusCode::kInvalidArgument, "geometry"));
  // The engine's fingerprint covers chunk_tokens: when both differ the
  // error names the chunk size first (a user's --chunk-tokens).
  geometry.fingerprint = 0xbeef;
  EXPECT_THAT(ChunkStore::Open(geometry),
              StatusIs(StatusCode::kInvalidArgument, "written with chunks of 16 tokens, not 32 (--chunk-tokens)"));
  // Not a directory we can create.
  std::ofstream(dir.path() + "/plainfile") << "x";
  // The error names the directory and the system's reason (errno-mapped code).
  auto bad_dir = [](const std::string& d) {
    auto r = ChunkStore::Open(Options(d));
    EXPECT_FALSE(r.ok()) << d;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("cache directory " + d), std::string::npos)
          << r.status().ToString();
    }
  };
  bad_dir(dir.path() + "/plainfile/cache");
  // A directory nobody may create (tests run as root, so not chmod: /proc).
  bad_dir("/proc/tierkv_cache");
  // A file the store did not write.
  EXPECT_THAT(ChunkStore::Open(Options(dir.path())),
              StatusIs(StatusCode::kInvalidArgument, "did not write: plainfile"));
  std::remove((dir.path() + "/plainfile").c_str());
  // A segment that is a symbolic link.
  ASSERT_EQ(0, ::symlink("/etc/passwd", (dir.path() + "/seg-000099.tkv").c_str()));
  EXPECT_THAT(ChunkStore::Open(Options(dir.path())),
              StatusIs(StatusCode::kInvalidArgument, "symbolic link"));
  std::remove((dir.path() + "/seg-000099.tkv").c_str());
  // A budget below one token chunk.
  StoreOptions tiny = Options(dir.path());
  tiny.disk_budget_bytes = 4096;
  EXPECT_THAT(ChunkStore::Open(tiny), StatusIs(StatusCode::kInvalidArgument, "smaller than one"));
  // Bad K/V input.
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
  Tokens p = Prompt(2, 0, 20);
  PromptKv kv(p, kLayers, kRow);
  KvInput short_kv = kv.input;
  short_kv.v[1] = short_kv.v[1].first(100);
  EXPECT_THAT(store->Put(p, short_kv), StatusIs(StatusCode::kInvalidArgument, "layer 1"));
  short_kv.k.pop_back();
  EXPECT_THAT(store->Put(p, short_kv), StatusIs(StatusCode::kInvalidArgument, "layers"));
  // Reads of chunks that are not there.
  ChunkRead r{12345, 0, 0, nullptr, nullptr};
  ASSERT_OK(store->Read(std::span<ChunkRead>(&r, 1)));
  EXPECT_THAT(r.status, StatusIs(StatusCode::kNotFound));
}

TEST(ChunkStoreErrorsTest, ReadOnlyOpenNeverWritesAndReadsTheIdentity) {
  TempDir dir;
  StoreOptions ro = Options(dir.path() + "/absent");
  ro.read_only = true;
  EXPECT_THAT(ChunkStore::Open(ro), StatusIs(StatusCode::kNotFound, "does not exist"));
  EXPECT_NE(::access((dir.path() + "/absent").c_str(), F_OK), 0);  // not created
  ro.dir = dir.path();
  EXPECT_THAT(ChunkStore::Open(ro), StatusIs(StatusCode::kNotFound, "not a tierkv cache"));
  EXPECT_THAT(ReadStoreIdentity(nullptr, dir.path()),
              StatusIs(StatusCode::kNotFound, "not a tierkv cache"));
  Tokens p = Prompt(1, 0, 40);
  {
    StoreOptions o = Options(dir.path());
    o.model_description = "test model\nwith a newline";
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));
    PromptKv kv(p, kLayers, kRow);
    ASSERT_OK(store->Put(p, kv.input).status());
  }
  ASSERT_OK_AND_ASSIGN(StoreOptions id, ReadStoreIdentity(nullptr, dir.path()));
  EXPECT_EQ(id.fingerprint, 0xfeedULL);
  EXPECT_EQ(id.chunk_tokens, kChunk);
  EXPECT_EQ(id.layers, kLayers);
  EXPECT_EQ(id.row_bytes, kRow);
  EXPECT_EQ(id.dtype, KvDtype::kF16);
  EXPECT_EQ(id.model_description, "test model with a newline");
  auto listing = [&] {
    std::string out;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
      out += e.path().filename().string() + ":" + std::to_string(e.file_size()) + " ";
    }
    return out;
  };
  const std::string before = listing();
  id.read_only = true;
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(id));
  EXPECT_EQ(store->stats().live_chunks, 3u);
  EXPECT_EQ(VerifyPrompt(*store, p), p.size());
  PromptKv kv(p, kLayers, kRow);
  EXPECT_THAT(store->Put(Prompt(2, 0, 20), PromptKv(Prompt(2, 0, 20), kLayers, kRow).input),
              StatusIs(StatusCode::kInvalidArgument, "read-only"));
  EXPECT_EQ(listing(), before);
  // A damaged identity file names the bad field.
  {
    std::ifstream in(dir.path() + "/STORE");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find("layers ");
    text.replace(at, text.find('\n', at) - at, "layers many");
    std::ofstream(dir.path() + "/STORE") << text;
  }
  EXPECT_THAT(ReadStoreIdentity(nullptr, dir.path()),
              StatusIs(StatusCode::kInvalidArgument, "'layers'"));
}

// One writer per directory; read-only opens (inspect) still work beside it.
TEST(ChunkStoreErrorsTest, ASecondWriterOnOneDirectoryIsRefused) {
  TempDir dir;
  Tokens p = Prompt(3, 0, 40);
  ASSERT_OK_AND_ASSIGN(auto first, ChunkStore::Open(Options(dir.path())));
  ASSERT_OK(first->Put(p, PromptKv(p, kLayers, kRow).input).status());
  EXPECT_THAT(ChunkStore::Open(Options(dir.path())),
              StatusIs(StatusCode::kUnavailable, "is in use by another tierkv store"));
  StoreOptions ro = Options(dir.path());
  ro.read_only = true;
  {
    ASSERT_OK_AND_ASSIGN(auto reader, ChunkStore::Open(ro));
    EXPECT_EQ(VerifyPrompt(*reader, p), p.size());
  }
  first.reset();
  ASSERT_OK_AND_ASSIGN(auto second, ChunkStore::Open(Options(dir.path())));
  EXPECT_EQ(VerifyPrompt(*second, p), p.size());
}

// Chunk ids are reused after eviction: a read named by a lookup made before
// the eviction is NotFound, never the new chunk's K/V.
TEST(ChunkStoreErrorsTest, ReadAfterEvictionAndIdReuseIsNotFound) {
  TempDir dir;
  StoreOptions o = Options(dir.path());
  o.disk_budget_bytes = 2 * kLayers * 3 * kBlockSize;  // two full chunks
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));
  Tokens a = Prompt(1, 0, 16), b = Prompt(2, 0, 32);
  ASSERT_OK(store->Put(a, PromptKv(a, kLayers, kRow).input).status());
  LookupResult la = store->Lookup(a);
  ASSERT_EQ(la.chunks.size(), 1u);
  ASSERT_OK(store->Put(b, PromptKv(b, kLayers, kRow).input).status());
  EXPECT_EQ(store->Lookup(a).matched_tokens, 0u);  // evicted
  LookupResult lb = store->Lookup(b);
  ASSERT_EQ(lb.chunks.size(), 2u);
  EXPECT_TRUE(lb.chunks[0] == la.chunks[0] || lb.chunks[1] == la.chunks[0]);  // the id is reused
  std::string k(kChunk * kRow, '\0'), v = k;
  ChunkRead r{la.chunks[0], la.prefix_hashes[0], 0, k.data(), v.data()};
  ASSERT_OK(store->Read(std::span<ChunkRead>(&r, 1)));
  EXPECT_THAT(r.status, StatusIs(StatusCode::kNotFound));
  EXPECT_EQ(k, std::string(kChunk * kRow, '\0'));
}

// A chunk whose layers recovery finds in different places (here: a newer
// copy of one layer's record in a later segment) keeps a per-layer location
// list and reads back exactly.
TEST(ChunkStoreRecoveryTest, ScatteredLayersAreFollowed) {
  TempDir dir;
  Tokens p = Prompt(5, 0, 32);
  std::string copy;
  {
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
    ASSERT_OK(store->Put(p, PromptKv(p, kLayers, kRow).input).status());
    const auto w0 = store->TEST_location(store->Lookup(p).chunks[1], 0);
    const auto w1 = store->TEST_location(store->Lookup(p).chunks[1], 1);
    EXPECT_EQ(w1.segment, w0.segment);
    EXPECT_EQ(w1.block, w0.block + store->record_bytes(kChunk) / kBlockSize);  // back to back
    std::ifstream in(store->SegmentPath(w1.segment), std::ios::binary);
    in.seekg(uint64_t{w1.block} * kBlockSize);
    copy.resize(store->record_bytes(kChunk));
    in.read(copy.data(), static_cast<std::streamsize>(copy.size()));
  }
  std::ofstream(dir.path() + "/seg-000099.tkv", std::ios::binary) << copy;
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
  const uint32_t chunk = store->Lookup(p).chunks[1];
  EXPECT_EQ(store->TEST_location(chunk, 1).segment, 99u);
  EXPECT_NE(store->TEST_location(chunk, 0).segment, 99u);
  EXPECT_EQ(VerifyPrompt(*store, p), p.size());
}

// A crash at every mutating file-system call of a Put: afterwards, every
// prompt whose Put returned OK reads back exactly, the interrupted one is
// either absent or exact, and nothing else appears.
TEST(ChunkStoreCrashTest, CrashAtEveryStepOfTheWriteProtocol) {
  std::vector<Tokens> before = {Prompt(1, 0, 40), Prompt(2, 20, 50)};
  Tokens inflight = Prompt(3, 20, 70);
  // Count the steps of the interrupted Put once.
  uint64_t steps = 0;
  {
    auto mem = NewMemFileSystem();
    FaultInjectionFileSystem fs(mem.get());
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options("/cache", &fs)));
    for (const Tokens& p : before) {
      PromptKv kv(p, kLayers, kRow);
      ASSERT_OK(store->Put(p, kv.input).status());
    }
    uint64_t c0 = fs.mutating_calls();
    PromptKv kv(inflight, kLayers, kRow);
    ASSERT_OK(store->Put(inflight, kv.input).status());
    steps = fs.mutating_calls() - c0;
  }
  ASSERT_GE(steps, 3u);
  for (uint64_t crash_at = 1; crash_at <= steps + 1; ++crash_at) {
    SCOPED_TRACE("crash at step " + std::to_string(crash_at));
    auto mem = NewMemFileSystem();
    FaultInjectionFileSystem fs(mem.get());
    bool acked = false;
    {
      ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options("/cache", &fs)));
      for (const Tokens& p : before) {
        PromptKv kv(p, kLayers, kRow);
        ASSERT_OK(store->Put(p, kv.input).status());
      }
      fs.CrashAfter(crash_at);
      PromptKv kv(inflight, kLayers, kRow);
      acked = store->Put(inflight, kv.input).ok();
      EXPECT_EQ(acked, crash_at > steps);
    }
    ASSERT_OK(fs.DropUnsyncedData());
    fs.CrashAfter(0);
    fs.SetActive(true);
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options("/cache", &fs)));
    for (const Tokens& p : before) EXPECT_EQ(VerifyPrompt(*store, p), p.size());
    size_t got = VerifyPrompt(*store, inflight);
    if (acked) {
      EXPECT_EQ(got, inflight.size());
    } else {
      // Only what the earlier prompts share with it (20 tokens, so one whole chunk + 4).
      EXPECT_EQ(got, store->Lookup(inflight).matched_tokens);
      EXPECT_LE(got, 20u);
    }
    EXPECT_EQ(store->stats().corrupt_records, 0u);
  }
}

// ENOSPC while writing: the Put evicts for room and tries once more; when
// that fails too, it fails (counted), nothing it wrote becomes visible or
// stays on disk, the store keeps working, and a restart sees only
// acknowledged prompts. EIO on read: an error for that read.
TEST(ChunkStoreFaultTest, EnospcAndEio) {
  auto mem = NewMemFileSystem();
  FaultInjectionFileSystem fs(mem.get());
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options("/cache", &fs)));
  Tokens a = Prompt(1, 0, 40), b = Prompt(2, 0, 40);
  PromptKv ka(a, kLayers, kRow), kb(b, kLayers, kRow);
  ASSERT_OK(store->Put(a, ka.input).status());
  // EIO on read: an error for that read (the caller recomputes), no wrong bytes,
  // and the chunk stays indexed (the device may recover).
  FaultOptions fo;
  fo.one_in = 1;
  fo.read_eio = true;
  fs.SetOptions(fo);
  Status err;
  EXPECT_EQ(VerifyPrompt(*store, a, &err), 0u);
  EXPECT_THAT(err, StatusIs(StatusCode::kIOError));
  EXPECT_GT(store->stats().read_errors, 0u);
  fs.SetOptions(FaultOptions{});
  EXPECT_EQ(VerifyPrompt(*store, a), a.size());
  fo = FaultOptions{};
  fo.one_in = 1;
  fo.write_enospc = true;
  fs.SetOptions(fo);
  EXPECT_THAT(store->Put(b, kb.input), StatusIs(StatusCode::kResourceExhausted));
  EXPECT_EQ(store->Lookup(b).matched_tokens, 0u);
  EXPECT_EQ(store->stats().nospace_retries, 1u);
  EXPECT_EQ(store->stats().put_failures, 1u);
  // a was the least valuable chunk there was: evicted for room.
  const size_t a_left = store->Lookup(a).matched_tokens;
  fs.SetOptions(FaultOptions{});
  EXPECT_EQ(VerifyPrompt(*store, a), a_left);
  ASSERT_OK(store->Put(b, kb.input).status());
  EXPECT_EQ(VerifyPrompt(*store, b), b.size());
  store.reset();
  ASSERT_OK_AND_ASSIGN(store, ChunkStore::Open(Options("/cache", &fs)));
  EXPECT_EQ(VerifyPrompt(*store, a), a_left);
  EXPECT_EQ(VerifyPrompt(*store, b), b.size());
  EXPECT_EQ(store->stats().corrupt_records, 0u);
}

// A file system of `capacity` bytes: an append past it writes what fits and
// fails with ResourceExhausted, as write(2) does with ENOSPC. Files in
// `dir` count (the store's flat directory).
class QuotaFileSystem final : public FileSystem {
 public:
  QuotaFileSystem(FileSystem* base, std::string dir, uint64_t capacity)
      : base_(base), dir_(std::move(dir)), capacity_(capacity) {}
  void set_capacity(uint64_t c) { capacity_ = c; }
  uint64_t Used() {
    uint64_t used = 0;
    auto names = base_->ListDir(dir_);
    for (const std::string& n : names.ok() ? *names : std::vector<std::string>{}) {
      auto size = base_->FileSize(dir_ + "/" + n);
      used += size.ok() ? *size : 0;
    }
    return used;
  }

  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path,
                                                                const FileOptions& o) override {
    return base_->NewRandomAccessFile(path, o);
  }
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path, bool truncate) override {
    ASSIGN_OR_RETURN(auto file, base_->NewWritableFile(path, truncate));
    return std::unique_ptr<WritableFile>(new File(this, path, std::move(file)));
  }
  Status CreateDir(const std::string& path) override { return base_->CreateDir(path); }
  Status DeleteFile(const std::string& path) override { return base_->DeleteFile(path); }
  Status RenameFile(const std::string& from, const std::string& to) override { return base_->RenameFile(from, to); }
  Status SyncDir(const std::string& path) override { return base_->SyncDir(path); }
  Status Truncate(const std::string& path, uint64_t size) override { return base_->Truncate(path, size); }
  Result<std::vector<std::string>> ListDir(const std::string& path) override { return base_->ListDir(path); }
  Result<uint64_t> FileSize(const std::string& path) override { return base_->FileSize(path); }
  bool FileExists(const std::string& path) override { return base_->FileExists(path); }
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override { return base_->LockFile(path); }

 private:
  class File final : public WritableFile {
   public:
    File(QuotaFileSystem* fs, std::string path, std::unique_ptr<WritableFile> base)
        : fs_(fs), path_(std::move(path)), base_(std::move(base)) {}
    Status Append(std::string_view data) override {
      const uint64_t used = fs_->Used(), cap = fs_->capacity_;
      const uint64_t room = cap > used ? cap - used : 0;
      if (data.size() <= room) return base_->Append(data);
      if (room > 0) RETURN_IF_ERROR(base_->Append(data.substr(0, room)));
      return Status::ResourceExhausted(path_ + ": No space left on device (test quota)");
    }
    Status Sync() override { return base_->Sync(); }
    Status Close() override { return base_->Close(); }
    uint64_t Size() const override { return base_->Size(); }

   private:
    QuotaFileSystem* fs_;
    std::string path_;
    std::unique_ptr<WritableFile> base_;
  };
  FileSystem* base_;
  std::string dir_;
  std::atomic<uint64_t> capacity_;
};

// The segment files of /cache: bytes in all, and how many are empty.
struct Segments {
  uint64_t bytes = 0;
  size_t files = 0, empty = 0;
  std::set<uint32_t> numbers;
};
Segments SegmentsOf(FileSystem& fs) {
  Segments s;
  auto names = fs.ListDir("/cache");
  for (const std::string& n : names.ok() ? *names : std::vector<std::string>{}) {
    if (n.rfind("seg-", 0) != 0) continue;
    const uint64_t size = *fs.FileSize("/cache/" + n);
    s.bytes += size;
    ++s.files;
    s.empty += size == 0;
    s.numbers.insert(static_cast<uint32_t>(std::stoul(n.substr(4))));
  }
  return s;
}

// The segments the live chunks of `prompts` have records in.
std::set<uint32_t> LiveSegments(ChunkStore& store, const std::vector<Tokens>& prompts) {
  std::set<uint32_t> used;
  for (const Tokens& p : prompts) {
    for (uint32_t c : store.Lookup(p).chunks) {
      for (uint16_t l = 0; l < kLayers; ++l) used.insert(store.TEST_location(c, l).segment);
    }
  }
  return used;
}

// A disk that fills while the store has no budget (serve before
// --disk-budget-mib): every Put that meets ENOSPC evicts the least valuable
// chunks, compacts or deletes their segments, and stores on the second
// try, so every prompt is stored and reads back; no failed or empty
// segment is left behind, and after a restart every segment holds live
// records.
TEST(ChunkStoreDiskFullTest, AFullDiskEvictsAndStoringGoesOn) {
  auto mem = NewMemFileSystem();
  const uint64_t capacity = 6u << 20;  // 170 chunks; 1 MiB segments (28 chunks)
  QuotaFileSystem fs(mem.get(), "/cache", capacity);
  StoreOptions o = Options("/cache", &fs);
  std::vector<Tokens> prompts;
  for (uint32_t i = 0; i < 90; ++i) prompts.push_back(Prompt(500 + i, 0, 48));  // 270 chunks
  {
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));
    for (size_t i = 0; i < prompts.size(); ++i) {
      PromptKv kv(prompts[i], kLayers, kRow);
      auto r = store->Put(prompts[i], kv.input);
      ASSERT_OK(r.status()) << "prompt " << i << ", " << fs.Used() << " bytes on a disk of " << capacity;
      ASSERT_EQ(r->stored_tokens, 48u) << "prompt " << i;
      ASSERT_EQ(VerifyPrompt(*store, prompts[i]), 48u) << "prompt " << i;
      const Segments seg = SegmentsOf(fs);
      EXPECT_EQ(seg.empty, 0u) << "prompt " << i;
      EXPECT_LE(seg.bytes, capacity);
    }
    EXPECT_GT(store->stats().nospace_retries, 0u) << "the disk never filled";
    EXPECT_EQ(store->stats().put_failures, 0u);
    EXPECT_GT(store->stats().evicted_chunks, 0u);
  }
  // A restart: every segment left has live records; storing goes on.
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));
  const Segments seg = SegmentsOf(fs);
  EXPECT_EQ(LiveSegments(*store, prompts), seg.numbers);
  EXPECT_EQ(store->stats().skipped_records, 0u);
  Tokens fresh = Prompt(9999, 0, 48);
  PromptKv kv(fresh, kLayers, kRow);
  ASSERT_OK(store->Put(fresh, kv.input).status());
  EXPECT_EQ(VerifyPrompt(*store, fresh), 48u);
}

// ENOSPC in the middle of a Put with a disk budget (every write fails
// while it lasts): the Put fails and is counted, what it appended is cut
// off again (no empty or partial segment left), the segment files never
// exceed the budget, and the next Put after space returns stores.
TEST(ChunkStoreDiskFullTest, EnospcMidPutLeavesNothingAndTheNextPutStores) {
  auto mem = NewMemFileSystem();
  FaultInjectionFileSystem fs(mem.get());
  StoreOptions o = Options("/cache", &fs);
  const uint64_t budget = 4u << 20;  // 113 chunks: 85 live, 28 dead at most
  SetDiskBudget(&o, budget);
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));
  EXPECT_EQ(store->stats().budget_bytes, budget);
  std::vector<Tokens> prompts;
  for (uint32_t i = 0; i < 80; ++i) prompts.push_back(Prompt(700 + i, 0, 48));  // 240 chunks
  uint64_t failures = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const bool full = i % 10 == 5;  // now and then the disk is full for one Put
    if (full) {
      FaultOptions fo;
      fo.one_in = 1;
      fo.write_enospc = true;
      fs.SetOptions(fo);
    }
    const Segments before = SegmentsOf(fs);
    PromptKv kv(prompts[i], kLayers, kRow);
    auto r = store->Put(prompts[i], kv.input);
    fs.SetOptions(FaultOptions{});
    const Segments after = SegmentsOf(fs);
    if (full) {
      EXPECT_THAT(r, StatusIs(StatusCode::kResourceExhausted)) << "prompt " << i;
      EXPECT_EQ(store->Lookup(prompts[i]).matched_tokens, 0u);
      EXPECT_LE(after.bytes, before.bytes) << "prompt " << i << ": the failed write's bytes stayed";
      ++failures;
    } else {
      ASSERT_OK(r.status()) << "prompt " << i;
      EXPECT_EQ(VerifyPrompt(*store, prompts[i]), 48u) << "prompt " << i;
    }
    EXPECT_EQ(after.empty, 0u) << "prompt " << i;
    EXPECT_LE(after.bytes, budget) << "prompt " << i;
    const StoreStats st = store->stats();
    EXPECT_LE(st.live_bytes + st.dead_bytes, budget) << "prompt " << i;
  }
  EXPECT_EQ(store->stats().put_failures, failures);
  EXPECT_EQ(store->stats().nospace_retries, failures);
  EXPECT_GT(store->stats().compactions, 0u);
  store.reset();
  ASSERT_OK_AND_ASSIGN(store, ChunkStore::Open(o));
  EXPECT_EQ(LiveSegments(*store, prompts), SegmentsOf(fs).numbers);
  for (size_t i = 76; i < prompts.size(); ++i) EXPECT_EQ(VerifyPrompt(*store, prompts[i]), 48u) << "prompt " << i;
}

}  // namespace
}  // namespace tierkv::store

namespace tierkv::store {
namespace {

using ::tierkv::testing::IsOk;
using ::tierkv::testing::StatusIs;

TEST(ManifestTest, RoundTripAndEveryDamageIsCorruption) {
  Manifest m;
  m.fingerprint = 0xabc;
  m.chunk_tokens = 4;
  m.layers = 2;
  m.log_from = 7;
  m.sequence = 99;
  m.segments = {3, 5};
  m.chunks.push_back(ManifestChunk{11, 0, 0, {1, 2, 3, 4}, {{3, 0}, {3, 2}}});
  m.chunks.push_back(ManifestChunk{12, 11, 4, {5, 6}, {{5, 1}, {5, 9}}});
  m.chunks[0].pages = 2;  // version 3: page checksums and runs
  m.chunks[0].page_checksums = {7, 8, 9, 10};
  ManifestRun run;
  run.first_token = 0;
  run.rows = 6;
  run.records = 2;
  run.end_hash = 12;
  run.hashes = {11, 12};
  run.where = {{5, 20}, {5, 22}, {5, 24}, {5, 26}};
  run.slot_of = {5, 4, 3, 2, 1, 0, 0, 1, 2, 3, 4, 5};
  m.runs.push_back(run);
  const std::string bytes = EncodeManifest(m);
  ASSERT_OK_AND_ASSIGN(Manifest d, DecodeManifest(bytes));
  EXPECT_EQ(d.fingerprint, m.fingerprint);
  EXPECT_EQ(d.log_from, 7u);
  EXPECT_EQ(d.sequence, 99u);
  EXPECT_EQ(d.segments, m.segments);
  ASSERT_EQ(d.chunks.size(), 2u);
  EXPECT_EQ(d.chunks[1].tokens, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(d.chunks[1].where[1], (std::pair<uint32_t, uint32_t>{5, 9}));
  EXPECT_EQ(d.chunks[0].page_checksums, m.chunks[0].page_checksums);
  EXPECT_EQ(d.chunks[1].pages, 0u);
  ASSERT_EQ(d.runs.size(), 1u);
  EXPECT_EQ(d.runs[0].hashes, run.hashes);
  EXPECT_EQ(d.runs[0].where, run.where);
  EXPECT_EQ(d.runs[0].slot_of, run.slot_of);
  EXPECT_EQ(EncodeManifest(d), bytes);
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x10;
    EXPECT_THAT(DecodeManifest(bad), StatusIs(StatusCode::kCorruption)) << "byte " << i;
  }
  for (size_t n : {size_t{0}, size_t{8}, bytes.size() / 2, bytes.size() - 1}) {
    EXPECT_THAT(DecodeManifest(bytes.substr(0, n)), StatusIs(StatusCode::kCorruption)) << n;
  }
}

std::vector<Tokens> SomePrompts(int n, int len) {
  std::vector<Tokens> out;
  for (int i = 0; i < n; ++i) out.push_back(Prompt(100 + i, i % 3 == 0 ? 0 : 16, len));
  return out;
}

TEST(ManifestTest, ReopenReadsTheManifestAndScansOnlyLaterSegments) {
  TempDir dir;
  std::vector<Tokens> first = SomePrompts(6, 50), later = SomePrompts(9, 70);
  later.erase(later.begin(), later.begin() + 6);
  {
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
    for (const Tokens& p : first) ASSERT_OK(store->Put(p, PromptKv(p, kLayers, kRow).input).status());
  }  // clean close: manifest
  const size_t chunks = [&] {
    auto st = ChunkStore::Open(Options(dir.path()));
    EXPECT_THAT(st, IsOk());
    const StoreStats s = (*st)->stats();
    EXPECT_EQ(s.scanned_segments, 0u);
    EXPECT_EQ(s.manifest_chunks, s.live_chunks);
    for (const Tokens& p : first) EXPECT_EQ(VerifyPrompt(**st, p), p.size());
    return s.live_chunks;
  }();
  ASSERT_GT(chunks, 0u);
  {
    StoreOptions o = Options(dir.path());
    o.checkpoint_on_close = false;  // as if the process died after these Puts
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));
    for (const Tokens& p : later) ASSERT_OK(store->Put(p, PromptKv(p, kLayers, kRow).input).status());
  }
  {
    StoreOptions o = Options(dir.path());
    o.checkpoint_on_close = false;
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));
    const StoreStats s = store->stats();
    EXPECT_EQ(s.manifest_chunks, chunks);
    EXPECT_GE(s.scanned_segments, 1u);
    EXPECT_GT(s.live_chunks, chunks);
    for (const Tokens& p : first) EXPECT_EQ(VerifyPrompt(*store, p), p.size());
    for (const Tokens& p : later) EXPECT_EQ(VerifyPrompt(*store, p), p.size());
  }
  // A damaged manifest: recovery falls back to every segment, loses nothing.
  {
    std::fstream f(dir.path() + "/MANIFEST", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
  EXPECT_EQ(store->stats().manifest_errors, 1u);
  EXPECT_EQ(store->stats().manifest_chunks, 0u);
  for (const Tokens& p : first) EXPECT_EQ(VerifyPrompt(*store, p), p.size());
  for (const Tokens& p : later) EXPECT_EQ(VerifyPrompt(*store, p), p.size());
}

// Budget evictions leave dead records; compaction rewrites the segments that
// are mostly dead and deletes them; every live prompt still reads back exact,
// before and after a reopen.
TEST(CompactionTest, ReclaimsDeadBytesAndKeepsEveryLiveChunkExact) {
  TempDir dir;
  StoreOptions o = Options(dir.path());
  ChunkStore* raw = nullptr;
  std::vector<Tokens> prompts = SomePrompts(40, 64);
  {
    TempDir other;
    ASSERT_OK_AND_ASSIGN(auto probe, ChunkStore::Open(Options(other.path())));
    o.disk_budget_bytes = 24 * kLayers * probe->record_bytes(kChunk);  // 24 chunks
  }
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));
  raw = store.get();
  for (const Tokens& p : prompts) ASSERT_OK(raw->Put(p, PromptKv(p, kLayers, kRow).input).status());
  const StoreStats before = raw->stats();
  ASSERT_GT(before.dead_bytes, 0u);
  ASSERT_GT(before.evicted_chunks, 0u);
  std::vector<size_t> stored;
  for (const Tokens& p : prompts) stored.push_back(raw->Lookup(p).matched_tokens);
  ASSERT_OK_AND_ASSIGN(CompactResult r, raw->Compact(0.3));
  EXPECT_GE(r.segments, 1u);
  EXPECT_GT(r.bytes_reclaimed, 0u);
  const StoreStats after = raw->stats();
  EXPECT_LT(after.dead_bytes, before.dead_bytes);
  EXPECT_EQ(after.live_chunks, before.live_chunks);
  EXPECT_EQ(after.corrupt_records, 0u);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(VerifyPrompt(*raw, prompts[i]), stored[i]);
  store.reset();
  ASSERT_OK_AND_ASSIGN(store, ChunkStore::Open(o));
  EXPECT_EQ(store->stats().live_chunks, before.live_chunks);
  EXPECT_EQ(store->stats().skipped_records, 0u);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(VerifyPrompt(*store, prompts[i]), stored[i]);
  EXPECT_THAT(store->Compact(0), StatusIs(StatusCode::kInvalidArgument, "min_dead_fraction"));
}

// A crash at every file-system step of a compaction: afterwards every chunk
// that was live reads back exact (compaction only moves durable data).
TEST(CompactionTest, CrashAtEveryStepLosesNothing) {
  std::vector<Tokens> prompts = SomePrompts(12, 40);
  // A store whose budget evicted some chunks (dead records to reclaim).
  auto fill = [&](FaultInjectionFileSystem& fs, std::vector<size_t>* stored) {
    StoreOptions o = Options("/cache", &fs);
    o.checkpoint_on_close = false;
    o.disk_budget_bytes = 20 * kLayers * (kBlockSize * 2);  // 20 chunks of one payload page
    auto st = ChunkStore::Open(o);
    EXPECT_THAT(st, IsOk());
    std::unique_ptr<ChunkStore> store = std::move(st).value();
    for (const Tokens& p : prompts) EXPECT_THAT(store->Put(p, PromptKv(p, kLayers, kRow).input), IsOk());
    EXPECT_GT(store->stats().evicted_chunks, 0u);
    EXPECT_THAT(store->Checkpoint(), IsOk());
    for (const Tokens& p : prompts) stored->push_back(store->Lookup(p).matched_tokens);
    return store;
  };
  uint64_t steps = 0;
  {
    auto mem = NewMemFileSystem();
    FaultInjectionFileSystem fs(mem.get());
    std::vector<size_t> stored;
    auto store = fill(fs, &stored);
    const uint64_t c0 = fs.mutating_calls();
    ASSERT_OK_AND_ASSIGN(CompactResult r, store->Compact(0.0001));
    EXPECT_GE(r.segments, 1u);
    steps = fs.mutating_calls() - c0;
  }
  ASSERT_GE(steps, 4u);
  for (uint64_t crash_at = 1; crash_at <= steps + 1; ++crash_at) {
    SCOPED_TRACE("crash at step " + std::to_string(crash_at) + " of " + std::to_string(steps));
    auto mem = NewMemFileSystem();
    FaultInjectionFileSystem fs(mem.get());
    std::vector<size_t> stored;
    {
      auto store = fill(fs, &stored);
      fs.CrashAfter(crash_at);
      const bool ok = store->Compact(0.0001).ok();
      EXPECT_EQ(ok, crash_at > steps);
    }
    ASSERT_OK(fs.DropUnsyncedData());
    fs.CrashAfter(0);
    fs.SetActive(true);
    StoreOptions o = Options("/cache", &fs);
    o.disk_budget_bytes = 20 * kLayers * (kBlockSize * 2);
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));
    const StoreStats st = store->stats();
    SCOPED_TRACE("manifest chunks " + std::to_string(st.manifest_chunks) + ", errors " +
                 std::to_string(st.manifest_errors) + ", scanned segments " +
                 std::to_string(st.scanned_segments) + ", skipped " +
                 std::to_string(st.skipped_records) + ", live " + std::to_string(st.live_chunks));
    for (size_t i = 0; i < prompts.size(); ++i) {
      // At least what was live (a chunk evicted before the compaction may
      // come back if the crash left no manifest: its record is intact), and
      // every byte exact (VerifyPrompt compares them).
      Status err;
      EXPECT_GE(VerifyPrompt(*store, prompts[i], &err), stored[i]) << "prompt " << i << " " << err.ToString();
    }
    EXPECT_EQ(store->stats().corrupt_records, 0u);
  }
}

// A prompt stored under one namespace (a tenant's) is never found under
// another, nor under the shared one; each namespace's chunks hash from their
// namespace, and both come back after a clean restart (the manifest) and
// after a crash (the segments scanned).
TEST(ChunkStoreNamespaceTest, NamespacesNeverShareAPrefixAndSurviveRestarts) {
  for (const bool clean : {true, false}) {
    SCOPED_TRACE(clean ? "clean restart" : "crash");
    TempDir dir;
    const Tokens p = Prompt(7, 40, 70);
    const uint64_t alice = 0x1234, bob = 0x9876;
    std::vector<uint64_t> alice_hashes;
    {
      StoreOptions o = Options(dir.path());
      o.checkpoint_on_close = clean;
      ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));
      PromptKv kv(p, kLayers, kRow);
      kv.input.cache_namespace = alice;
      ASSERT_OK_AND_ASSIGN(PutResult r, store->Put(p, kv.input));
      EXPECT_EQ(r.stored_tokens, p.size());
      EXPECT_EQ(store->Lookup(p, alice).matched_tokens, p.size());
      EXPECT_EQ(store->Lookup(p, bob).matched_tokens, 0u);
      EXPECT_EQ(store->Lookup(p).matched_tokens, 0u);
      alice_hashes = store->Lookup(p, alice).prefix_hashes;
      kv.input.cache_namespace = bob;
      ASSERT_OK_AND_ASSIGN(r, store->Put(p, kv.input));
      EXPECT_EQ(r.new_chunks, (p.size() + kChunk - 1) / kChunk) << "bob's copy is his own";
      const LookupResult b = store->Lookup(p, bob);
      EXPECT_EQ(b.matched_tokens, p.size());
      for (size_t i = 0; i < b.prefix_hashes.size(); ++i) EXPECT_NE(b.prefix_hashes[i], alice_hashes[i]);
    }
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
    EXPECT_EQ(store->Lookup(p, alice).matched_tokens, p.size());
    EXPECT_EQ(store->Lookup(p, alice).prefix_hashes, alice_hashes);
    EXPECT_EQ(store->Lookup(p, bob).matched_tokens, p.size());
    EXPECT_EQ(store->Lookup(p).matched_tokens, 0u);
    EXPECT_EQ(store->Lookup(p, 0x5555).matched_tokens, 0u);
  }
}

// An empty newest segment (a crash right after creating it) is removed at
// open; the next segment must not take its number, or the manifest, whose
// log_from already counts it, would hold the new one for garbage and the
// next open would delete it with its acknowledged prompts (seen as
// Kill9Test losing an acked prompt, 2 runs in 20 under load).
TEST(ChunkStoreRecoveryTest, SegmentNumbersAreNeverReusedAfterADeadOneIsRemoved) {
  TempDir dir;
  const Tokens a = Prompt(1, 0, 40), c = Prompt(3, 0, 40);
  {
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
    PromptKv kv(a, kLayers, kRow);
    ASSERT_OK(store->Put(a, kv.input).status());
  }  // seg 1, manifest: log_from 2
  { std::ofstream(dir.path() + "/seg-000002.tkv"); }  // created, nothing written, then a crash
  {
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
    EXPECT_EQ(store->stats().removed_segments, 1u);
  }  // manifest: log_from 3
  {
    StoreOptions o = Options(dir.path());
    o.checkpoint_on_close = false;  // a kill -9 after the Put returned
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));
    PromptKv kv(c, kLayers, kRow);
    ASSERT_OK(store->Put(c, kv.input).status());
  }
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
  EXPECT_EQ(VerifyPrompt(*store, a), a.size());
  EXPECT_EQ(VerifyPrompt(*store, c), c.size()) << "the acknowledged prompt was lost";
}

}  // namespace
}  // namespace tierkv::store

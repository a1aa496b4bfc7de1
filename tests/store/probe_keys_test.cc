// Probe-head key records (kind 2): every chunk's probe keys are stored once
// more per layer so that identification reads them for a run of chunks with
// one request; they survive restarts (manifest or scan) and compaction, and a
// damaged or missing copy falls back to slicing the K records, never to
// wrong keys.
#include <gtest/gtest.h>

#include <filesystem>

#include "store/chunk_store.h"
#include "store/kv_fixture.h"
#include "testing/status_matchers.h"
#include "util/fault_injection_fs.h"

namespace tierkv::store {
namespace {

using ::tierkv::testing::StatusIs;
using testing::FlipByte;
using testing::Prompt;
using testing::PromptKv;
using testing::TempDir;
using Tokens = std::vector<int32_t>;

constexpr uint16_t kLayers = 3;
constexpr uint32_t kRow = 256;
constexpr uint32_t kProbe = 96;  // 3 heads of 16 fp16 dims
constexpr uint32_t kChunk = 16;

StoreOptions Options(const std::string& dir, FileSystem* fs = nullptr) {
  StoreOptions o;
  o.dir = dir;
  o.fs = fs;
  o.fingerprint = 0x9b0bULL;
  o.chunk_tokens = kChunk;
  o.layers = kLayers;
  o.row_bytes = kRow;
  o.probe_bytes = kProbe;
  o.segment_bytes = 1 << 20;
  o.disk.direct_io = fs == nullptr;
  return o;
}

struct ProbeResult {
  RowReadStats stats;
  size_t from_records = 0, ok = 0;
  Status first_error;
};

// Reads layer `layer`'s probe keys of every stored chunk of `p` and checks
// them against the first kProbe bytes of each K row.
ProbeResult ReadProbes(ChunkStore& store, const Tokens& p, uint16_t layer) {
  LookupResult m = store.Lookup(p);
  PromptKv want(p, kLayers, kRow);
  std::vector<std::string> out(m.chunks.size());
  std::vector<ProbeRead> reads;
  for (size_t c = 0; c < m.chunks.size(); ++c) {
    out[c].assign(m.chunk_tokens[c] * kProbe, '\0');
    reads.push_back(ProbeRead{m.chunks[c], m.prefix_hashes[c], layer, out[c].data()});
  }
  ProbeResult r;
  EXPECT_OK(store.ReadProbeKeys(reads, &r.stats));
  for (size_t c = 0; c < reads.size(); ++c) {
    if (!reads[c].status.ok()) {
      if (r.first_error.ok()) r.first_error = reads[c].status;
      continue;
    }
    ++r.ok;
    r.from_records += reads[c].from_probe_record;
    const size_t used = std::min<size_t>(m.chunk_tokens[c], m.matched_tokens - c * kChunk);
    for (size_t t = 0; t < used; ++t) {
      EXPECT_EQ(0, std::memcmp(out[c].data() + t * kProbe,
                               want.k[layer].data() + (c * kChunk + t) * kRow, kProbe))
          << "probe keys of token " << c * kChunk + t << " layer " << layer;
    }
  }
  return r;
}

TEST(ProbeKeysTest, OneReadPerLayerForAPromptsChunksAndExactKeys) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
  Tokens p = Prompt(1, 0, 70);  // 4 full chunks and a 6-token tail
  PromptKv kv(p, kLayers, kRow);
  ASSERT_OK(store->Put(p, kv.input).status());
  for (uint16_t l = 0; l < kLayers; ++l) {
    const ProbeResult r = ReadProbes(*store, p, l);
    EXPECT_EQ(r.ok, 5u);
    EXPECT_EQ(r.from_records, 5u);
    EXPECT_EQ(r.stats.records, 5u);
    EXPECT_EQ(r.stats.ios, 1u);  // the 5 records sit back to back
    EXPECT_EQ(r.stats.bytes, 5u * store->probe_record_bytes(kChunk));
  }
  // The probe copies count as stored bytes.
  EXPECT_EQ(store->stats().live_bytes,
            kLayers * (4 * (store->record_bytes(16) + store->probe_record_bytes(16)) +
                       store->record_bytes(6) + store->probe_record_bytes(6)));

  // A store without probe_bytes refuses; a probe wider than a row is an error.
  TempDir other;
  StoreOptions o = Options(other.path());
  o.probe_bytes = 0;
  ASSERT_OK_AND_ASSIGN(auto plain, ChunkStore::Open(o));
  ProbeRead pr{0, 0, 0, nullptr};
  EXPECT_THAT(plain->ReadProbeKeys(std::span<ProbeRead>(&pr, 1)),
              StatusIs(StatusCode::kInvalidArgument));
  o.probe_bytes = kRow + 2;
  EXPECT_THAT(ChunkStore::Open(o).status(), StatusIs(StatusCode::kInvalidArgument));
}

TEST(ProbeKeysTest, SurviveRestartWithAndWithoutManifest) {
  TempDir dir;
  std::vector<Tokens> prompts = {Prompt(1, 0, 64), Prompt(2, 32, 80), Prompt(3, 32, 40)};
  {
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
    for (const Tokens& p : prompts) {
      PromptKv kv(p, kLayers, kRow);
      ASSERT_OK(store->Put(p, kv.input).status());
    }
  }
  for (bool manifest : {true, false}) {
    SCOPED_TRACE(manifest ? "manifest" : "scan");
    if (!manifest) std::filesystem::remove(dir.path() + "/MANIFEST");
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
    EXPECT_EQ(store->stats().manifest_chunks > 0, manifest);
    for (const Tokens& p : prompts) {
      for (uint16_t l = 0; l < kLayers; ++l) {
        const ProbeResult r = ReadProbes(*store, p, l);
        EXPECT_EQ(r.ok, r.stats.records);
        EXPECT_EQ(r.from_records, r.ok);  // no fallback
      }
    }
    EXPECT_EQ(store->stats().skipped_records, 0u);
  }
}

TEST(ProbeKeysTest, DamagedCopyFallsBackToTheKRecords) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir.path())));
  Tokens p = Prompt(1, 0, 64);
  PromptKv kv(p, kLayers, kRow);
  ASSERT_OK(store->Put(p, kv.input).status());
  const uint64_t live = store->stats().live_bytes;
  // Find chunk 2's layer-1 probe record: the only probe records are after
  // the 4 chunks' K/V records; read it through the scan layout.
  const LookupResult m = store->Lookup(p);
  const auto kv0 = store->TEST_location(m.chunks[0], 0);
  const uint64_t kv_blocks = 4 * kLayers * store->record_bytes(kChunk) / kBlockSize;
  const uint64_t probe_blocks = store->probe_record_bytes(kChunk) / kBlockSize;
  const uint64_t block = kv0.block + kv_blocks + (1 * 4 + 2) * probe_blocks;  // layer 1, chunk 2
  FlipByte(store->SegmentPath(kv0.segment), block * kBlockSize + kBlockSize + 5);
  ProbeResult r = ReadProbes(*store, p, 1);
  EXPECT_EQ(r.ok, 4u);            // every chunk's keys, exact
  EXPECT_EQ(r.from_records, 3u);  // the damaged one sliced from K
  EXPECT_EQ(store->stats().corrupt_records, 1u);
  EXPECT_EQ(store->Lookup(p).matched_tokens, p.size());  // the chunk stays
  // The copy is gone for every layer of that chunk; its bytes are dead.
  r = ReadProbes(*store, p, 0);
  EXPECT_EQ(r.from_records, 3u);
  EXPECT_EQ(r.ok, 4u);
  EXPECT_EQ(store->stats().live_bytes, live - kLayers * store->probe_record_bytes(kChunk));
  EXPECT_EQ(store->stats().corrupt_records, 1u);
}

TEST(ProbeKeysTest, CompactionMovesThemWithTheirChunk) {
  TempDir dir;
  StoreOptions o = Options(dir.path());
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));
  const uint64_t per_chunk = kLayers * (store->record_bytes(kChunk) + store->probe_record_bytes(kChunk));
  store.reset();
  std::filesystem::remove_all(dir.path());
  o.disk_budget_bytes = 10 * per_chunk;  // evictions leave dead bytes behind
  ASSERT_OK_AND_ASSIGN(store, ChunkStore::Open(o));
  std::vector<Tokens> prompts;
  for (uint32_t i = 0; i < 8; ++i) prompts.push_back(Prompt(20 + i, 0, 48));
  for (const Tokens& p : prompts) {
    PromptKv kv(p, kLayers, kRow);
    ASSERT_OK(store->Put(p, kv.input).status());
  }
  ASSERT_GT(store->stats().evicted_chunks, 0u);
  ASSERT_OK_AND_ASSIGN(CompactResult c, store->Compact(0.01));
  EXPECT_GT(c.records_moved, 0u);
  EXPECT_EQ(store->stats().dead_bytes, 0u);
  for (const Tokens& p : prompts) {
    for (uint16_t l = 0; l < kLayers; ++l) {
      const ProbeResult r = ReadProbes(*store, p, l);
      EXPECT_EQ(r.from_records, r.ok);
    }
  }
  store.reset();
  ASSERT_OK_AND_ASSIGN(store, ChunkStore::Open(o));
  for (const Tokens& p : prompts) {
    const ProbeResult r = ReadProbes(*store, p, 2);
    EXPECT_EQ(r.from_records, r.ok);
  }
}

// Failure-semantics row: a crash at any step of a Put with probe records
// loses only the unacknowledged prompt; every probe key read back is exact.
TEST(ProbeKeysTest, CrashAtEveryStepOfAPutWithProbes) {
  const Tokens before = Prompt(1, 0, 40), inflight = Prompt(3, 16, 70);
  uint64_t steps = 0;
  {
    auto mem = NewMemFileSystem();
    FaultInjectionFileSystem fs(mem.get());
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options("/cache", &fs)));
    PromptKv kv0(before, kLayers, kRow), kv(inflight, kLayers, kRow);
    ASSERT_OK(store->Put(before, kv0.input).status());
    const uint64_t c0 = fs.mutating_calls();
    ASSERT_OK(store->Put(inflight, kv.input).status());
    steps = fs.mutating_calls() - c0;
  }
  for (uint64_t crash_at = 1; crash_at <= steps + 1; ++crash_at) {
    SCOPED_TRACE("crash at step " + std::to_string(crash_at));
    auto mem = NewMemFileSystem();
    FaultInjectionFileSystem fs(mem.get());
    bool acked = false;
    {
      StoreOptions o = Options("/cache", &fs);
      o.checkpoint_on_close = false;
      ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));
      PromptKv kv0(before, kLayers, kRow), kv(inflight, kLayers, kRow);
      ASSERT_OK(store->Put(before, kv0.input).status());
      fs.CrashAfter(crash_at);
      acked = store->Put(inflight, kv.input).ok();
    }
    ASSERT_OK(fs.DropUnsyncedData());
    fs.CrashAfter(0);
    fs.SetActive(true);
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options("/cache", &fs)));
    EXPECT_EQ(store->Lookup(before).matched_tokens, before.size());
    if (acked) {
      EXPECT_EQ(store->Lookup(inflight).matched_tokens, inflight.size());
    }
    for (const Tokens& p : {before, inflight}) {
      for (uint16_t l = 0; l < kLayers; ++l) {
        const ProbeResult r = ReadProbes(*store, p, l);
        EXPECT_EQ(r.ok, r.stats.records) << r.first_error.ToString();
        EXPECT_EQ(r.from_records, r.ok);
      }
    }
    EXPECT_EQ(store->stats().corrupt_records, 0u);
  }
}

}  // namespace
}  // namespace tierkv::store

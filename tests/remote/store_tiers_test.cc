// StoreTiers on its own: a real store on disk and a real redis-server
// (skipped without one): what a put sends up, what a lookup falls through
// to, and what a retry or a failed put must not do.
#include "remote/store_tiers.h"

#include <gtest/gtest.h>

#include <vector>

#include "store/kv_fixture.h"
#include "testing/redis_server.h"
#include "testing/status_matchers.h"

namespace tierkv::remote {
namespace {

using store::testing::Prompt;
using store::testing::PromptKv;
using store::testing::TempDir;

constexpr uint16_t kLayers = 2;
constexpr uint32_t kRow = 256;
constexpr uint32_t kChunk = 16;

store::StoreOptions StoreOpts(const std::string& dir) {
  store::StoreOptions o;
  o.dir = dir;
  o.fingerprint = 0x5eedULL;
  o.chunk_tokens = kChunk;
  o.layers = kLayers;
  o.row_bytes = kRow;
  o.dtype = store::KvDtype::kF16;
  o.segment_bytes = 1 << 20;
  return o;
}

struct Side {
  TempDir dir;
  std::unique_ptr<store::ChunkStore> store;
  std::unique_ptr<StoreTiers> tiers;
  int admitted_layers = 0;  // chunk layers handed to the caller's pools
};

void OpenSide(Side* s, const std::string& url, RemoteAdmit admit) {
  ASSERT_OK_AND_ASSIGN(s->store, store::ChunkStore::Open(StoreOpts(s->dir.path())));
  RemoteOptions ro;
  ro.url = url;
  ro.admit = admit;
  ASSERT_OK_AND_ASSIGN(s->tiers, StoreTiers::Open(s->store.get(), ro,
                                                  RemoteGeometry{0x5eedULL, kLayers, kRow, kChunk},
                                                  [s](uint64_t, uint16_t, std::span<const char>) {
                                                    ++s->admitted_layers;
                                                  }));
}

TEST(StoreTiersTest, ReusableTokensCapAndRoundToWholeChunks) {
  store::LookupResult m;
  m.matched_tokens = 40;
  EXPECT_EQ(ReusableTokens(m, 100, false, kChunk), 40u);
  EXPECT_EQ(ReusableTokens(m, 35, false, kChunk), 35u);  // at most cap
  EXPECT_EQ(ReusableTokens(m, 100, true, kChunk), 32u);  // whole chunks
  EXPECT_EQ(ReusableTokens(m, 15, true, kChunk), 0u);
}

TEST(StoreTiersTest, APutGoesUpAndAnotherStoresLookupFallsThroughToIt) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  const std::vector<int32_t> tokens = Prompt(1, 0, 4 * kChunk);
  Side a, b;
  OpenSide(&a, redis.url(), RemoteAdmit::kAlways);
  PromptKv kv(tokens, kLayers, kRow);
  ASSERT_OK(a.tiers->Put(tokens, kv.input).status());
  a.tiers->Drain();
  EXPECT_EQ(a.tiers->remote_stats().uploads, 4u);

  OpenSide(&b, redis.url(), RemoteAdmit::kAlways);
  // A retry reads the local store only: nothing comes down.
  TierMatch retry = b.tiers->Lookup(tokens, TierQuery{.cap = tokens.size() - 1, .fall_through = false});
  EXPECT_EQ(retry.local.matched_tokens, 0u);
  EXPECT_EQ(retry.remote_chunks, 0u);
  EXPECT_EQ(b.tiers->remote_stats().lookups, 0u);

  // The whole chunks below cap (63 tokens: 3 of the 4) come down, are
  // admitted into b's store and handed to its pools; that match is reused.
  TierMatch first = b.tiers->Lookup(tokens, TierQuery{.cap = tokens.size() - 1, .whole_chunks = true});
  EXPECT_EQ(first.remote_chunks, 3u);
  EXPECT_GT(first.remote_bytes, 0u);
  EXPECT_EQ(first.local.matched_tokens, 3 * kChunk);
  EXPECT_EQ(first.reusable, 3 * kChunk);
  EXPECT_EQ(b.admitted_layers, 3 * kLayers);
  EXPECT_EQ(b.store->Lookup(tokens).matched_tokens, 3 * kChunk);
  EXPECT_EQ(b.tiers->remote_stats().hits, 3u);
}

TEST(StoreTiersTest, AFailedPutSendsNothingUpAndWithoutARemoteOnlyTheStoreIsAsked) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  const std::vector<int32_t> tokens = Prompt(2, 0, 2 * kChunk);
  Side a;
  OpenSide(&a, redis.url(), RemoteAdmit::kAlways);
  PromptKv kv(tokens, kLayers, kRow);
  store::KvInput bad = kv.input;
  bad.k.pop_back();  // one layer short: the store refuses it
  EXPECT_FALSE(a.tiers->Put(tokens, bad).ok());
  a.tiers->Drain();
  EXPECT_EQ(a.tiers->remote_stats().uploads, 0u);
  EXPECT_EQ(a.tiers->remote_stats().queued, 0u);

  Side local;
  OpenSide(&local, "", RemoteAdmit::kAlways);
  EXPECT_FALSE(local.tiers->has_remote());
  ASSERT_OK(local.tiers->Put(tokens, kv.input).status());
  TierMatch m = local.tiers->Lookup(tokens, TierQuery{.cap = tokens.size()});
  EXPECT_EQ(m.local.matched_tokens, tokens.size());
  EXPECT_EQ(m.reusable, tokens.size());
  EXPECT_EQ(m.remote_chunks, 0u);
}

}  // namespace
}  // namespace tierkv::remote

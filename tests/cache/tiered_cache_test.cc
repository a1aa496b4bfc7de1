#include "cache/tiered_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "tierkv/tools/policy_trace.h"
#include "testing/status_matchers.h"

namespace tierkv::cache {
namespace {

using ::tierkv::testing::IsOk;
using ::tierkv::testing::StatusIs;

std::unique_ptr<TieredCache> Make(PolicyKind policy, uint64_t device, uint64_t host,
                                  double watermark = 0) {
  CacheOptions o;
  o.policy = policy;
  o.device_bytes = device;
  o.host_bytes = host;
  o.offload_watermark = watermark;
  auto c = TieredCache::Create(o);
  EXPECT_THAT(c, IsOk());
  return std::move(c).value();
}

Buffer Bytes(size_t n, char fill) { return std::make_shared<const std::vector<char>>(n, fill); }

// One request for `key`: a hit, or a miss followed by the disk read's Admit.
// Returns the tier that had it before the request.
Tier Request(TieredCache& c, uint64_t key, uint32_t important, uint32_t rows, uint64_t bytes) {
  const Tier before = c.TierOf(key);
  Pin p = c.Access(key, important, rows);
  if (p.tier() == Tier::kDisk) p = c.Admit(key, bytes, nullptr);
  return before;
}

TEST(PolicyTest, ParseNamesAndRejectsUnknown) {
  for (const char* n : {"lru", "lfu", "score", "car"}) {
    ASSERT_OK_AND_ASSIGN(PolicyKind k, ParsePolicy(n));
    EXPECT_STREQ(PolicyName(k), n);
  }
  EXPECT_THAT(ParsePolicy("arc"), StatusIs(StatusCode::kInvalidArgument, "unknown cache policy"));
}

TEST(TieredCacheTest, RejectsBadOptions) {
  CacheOptions o;
  o.offload_watermark = 1.5;
  EXPECT_THAT(TieredCache::Create(o), StatusIs(StatusCode::kInvalidArgument, "offload_watermark"));
  o = CacheOptions();
  o.params.ratio_weight = 0;
  EXPECT_THAT(TieredCache::Create(o), StatusIs(StatusCode::kInvalidArgument, "ratio_weight"));
}

// IMPRESS Figure 14: chunk A (1 of 2 rows important) is requested 1.5x as
// often as chunk B (2 of 2 important); the device holds one chunk, the host
// the other. Over 15 requests of A and 10 of B, lfu keeps A on the device
// and moves B's 20 important rows to it; score keeps B and moves A's 15.
TEST(TieredCacheTest, Figure14ScoreKeepsTheImportantChunkLfuTheFrequentOne) {
  const uint64_t kA = 1, kB = 2, kBytes = 100;
  struct Case {
    PolicyKind policy;
    uint64_t on_device;
    uint64_t rows_moved;
  };
  for (const Case& cs : {Case{PolicyKind::kScore, kB, 15}, Case{PolicyKind::kLfu, kA, 20}}) {
    SCOPED_TRACE(PolicyName(cs.policy));
    auto c = Make(cs.policy, kBytes, kBytes);
    const uint64_t pattern[5] = {kA, kB, kA, kB, kA};
    auto run = [&](int rounds) {
      for (int r = 0; r < rounds; ++r) {
        for (uint64_t k : pattern) Request(*c, k, k == kA ? 1 : 2, 2, kBytes);
      }
    };
    run(5);  // warm-up: the paper's case starts from the steady state
    const CacheStats before = c->stats();
    run(5);  // 15 requests of A, 10 of B
    const CacheStats after = c->stats();
    EXPECT_EQ(c->TierOf(cs.on_device), Tier::kDevice);
    EXPECT_EQ(c->TierOf(cs.on_device == kA ? kB : kA), Tier::kHost);
    const uint64_t moved = (after.important_rows[1] + after.important_rows[2]) -
                           (before.important_rows[1] + before.important_rows[2]);
    EXPECT_EQ(moved, cs.rows_moved);
    EXPECT_THAT(c->TEST_Validate(), IsOk());
  }
}

TEST(TieredCacheTest, LruDemotesToHostThenDropsAndPromotesOnHostHit) {
  auto c = Make(PolicyKind::kLru, 200, 200);  // two chunks of 100 per pool
  for (uint64_t k = 1; k <= 5; ++k) EXPECT_EQ(Request(*c, k, 1, 1, 100), Tier::kDisk);
  // Device: 5, 4; host: 3, 2; 1 dropped (the disk still has it).
  EXPECT_EQ(c->TierOf(5), Tier::kDevice);
  EXPECT_EQ(c->TierOf(4), Tier::kDevice);
  EXPECT_EQ(c->TierOf(3), Tier::kHost);
  EXPECT_EQ(c->TierOf(2), Tier::kHost);
  EXPECT_EQ(c->TierOf(1), Tier::kDisk);
  EXPECT_EQ(Request(*c, 2, 1, 1, 100), Tier::kHost);
  EXPECT_EQ(c->TierOf(2), Tier::kDevice);  // promoted
  EXPECT_EQ(c->TierOf(4), Tier::kHost);    // the device's least recent, demoted into 2's room
  EXPECT_EQ(c->TierOf(3), Tier::kHost);
  EXPECT_EQ(Request(*c, 6, 1, 1, 100), Tier::kDisk);
  EXPECT_EQ(c->TierOf(6), Tier::kDevice);
  EXPECT_EQ(c->TierOf(5), Tier::kHost);
  EXPECT_EQ(c->TierOf(3), Tier::kDisk);    // the host's least recent, dropped
  const CacheStats s = c->stats();
  EXPECT_EQ(s.promotions, 1u);
  EXPECT_EQ(s.demotions, 5u);  // 3, 2 and 1 at the start, then 4 and 5
  EXPECT_EQ(s.host_drops, 2u);  // 1 and 3
  EXPECT_EQ(s.device_used, 200u);
  EXPECT_EQ(s.host_used, 200u);
  EXPECT_EQ(s.hits[1], 1u);
  EXPECT_EQ(s.hits[2], 6u);
  EXPECT_THAT(c->TEST_Validate(), IsOk());
}

TEST(TieredCacheTest, ChunkLargerThanAPoolSkipsIt) {
  auto c = Make(PolicyKind::kLru, 100, 1000);
  EXPECT_EQ(Request(*c, 1, 1, 1, 500), Tier::kDisk);
  EXPECT_EQ(c->TierOf(1), Tier::kHost);
  EXPECT_EQ(Request(*c, 2, 1, 1, 5000), Tier::kDisk);
  EXPECT_EQ(c->TierOf(2), Tier::kDisk);
  EXPECT_THAT(c->TEST_Validate(), IsOk());
}

TEST(TieredCacheTest, PinnedChunksAreSkippedNotWaitedOn) {
  auto c = Make(PolicyKind::kLru, 100, 0);
  Pin a = c->Access(1, 1, 1);
  a = c->Admit(1, 100, Bytes(100, 'a'));
  ASSERT_EQ(a.tier(), Tier::kDevice);
  // B is more recent, but A is pinned: B cannot displace it.
  Pin b = c->Access(2, 1, 1);
  b = c->Admit(2, 100, Bytes(100, 'b'));
  EXPECT_EQ(b.tier(), Tier::kDisk);
  ASSERT_NE(b.data(), nullptr);  // the caller still gets its bytes
  EXPECT_EQ((*b.data())[0], 'b');
  EXPECT_EQ(c->TierOf(1), Tier::kDevice);
  EXPECT_GE(c->stats().pinned_skips, 1u);
  a.Release();
  b.Release();
  Pin b2 = c->Access(2, 1, 1);
  b2 = c->Admit(2, 100, Bytes(100, 'b'));
  EXPECT_EQ(b2.tier(), Tier::kDevice);
  EXPECT_EQ(c->TierOf(1), Tier::kDisk);
  EXPECT_THAT(c->TEST_Validate(), IsOk());
}

TEST(TieredCacheTest, PinsKeepTheirBytesThroughPromotionAndErase) {
  auto c = Make(PolicyKind::kLru, 100, 100);
  { Pin p = c->Access(1, 1, 1); p = c->Admit(1, 100, Bytes(100, 'x')); }
  { Pin p = c->Access(2, 1, 1); p = c->Admit(2, 100, Bytes(100, 'y')); }
  ASSERT_EQ(c->TierOf(1), Tier::kHost);
  Pin old = c->Access(2, 1, 1);  // device hit, pinned
  Pin promoted = c->Access(1, 1, 1);  // host hit; cannot displace pinned 2
  EXPECT_EQ(promoted.tier(), Tier::kHost);
  old.Release();
  Pin again = c->Access(1, 1, 1);
  EXPECT_EQ(again.tier(), Tier::kDevice);
  ASSERT_NE(again.data(), nullptr);
  EXPECT_NE(again.data().get(), promoted.data().get());  // the device has its own copy
  EXPECT_EQ(*again.data(), *promoted.data());
  c->Erase(1);
  EXPECT_EQ(c->TierOf(1), Tier::kDisk);
  EXPECT_EQ((*again.data())[99], 'x');  // still readable through the pin
  again.Release();  // a pin of an erased chunk is harmless
  promoted.Release();
  // A new chunk under the same key is not unpinned by the old pin.
  Pin fresh = c->Access(1, 1, 1);
  fresh = c->Admit(1, 100, Bytes(100, 'z'));
  EXPECT_EQ(fresh.tier(), Tier::kDevice);
  EXPECT_THAT(c->TEST_Validate(), IsOk());
}

TEST(TieredCacheTest, CarScoreFollowsSchedulerEvents) {
  auto c = Make(PolicyKind::kCar, 100, 0);
  const uint64_t a = 1, b = 2;
  c->OnRequestEvent({&a, 1}, RequestEvent::kEnterWindow);
  c->OnRequestEvent({&a, 1}, RequestEvent::kStart);
  EXPECT_EQ(Request(*c, a, 1, 1, 100), Tier::kDisk);
  EXPECT_EQ(c->TierOf(a), Tier::kDevice);
  // B has only entered the window (score 1 < A's 2): stays on disk.
  c->OnRequestEvent({&b, 1}, RequestEvent::kEnterWindow);
  EXPECT_EQ(Request(*c, b, 1, 1, 100), Tier::kDisk);
  EXPECT_EQ(c->TierOf(b), Tier::kDisk);
  // A finishes (score 0); B starts (score 2) and takes the device.
  c->OnRequestEvent({&a, 1}, RequestEvent::kFinish);
  c->OnRequestEvent({&b, 1}, RequestEvent::kStart);
  EXPECT_EQ(Request(*c, b, 1, 1, 100), Tier::kDisk);
  EXPECT_EQ(c->TierOf(b), Tier::kDevice);
  EXPECT_EQ(c->TierOf(a), Tier::kDisk);
  EXPECT_THAT(c->TEST_Validate(), IsOk());
}

TEST(TieredCacheTest, CarOffloadsAboveTheWatermarkInTheBackground) {
  auto c = Make(PolicyKind::kCar, 1000, 10000, 0.9);
  for (uint64_t k = 0; k < 10; ++k) Request(*c, k, 1, 1, 100);
  c->TEST_WaitForOffload();
  const CacheStats s = c->stats();
  EXPECT_LE(s.device_used, 900u);
  EXPECT_GE(s.offloads, 1u);
  EXPECT_EQ(s.device_used + s.host_used, 1000u);  // demoted, not dropped
  EXPECT_THAT(c->TEST_Validate(), IsOk());
}

TEST(TieredCacheTest, RandomOperationsKeepTheInvariants) {
  for (PolicyKind policy : {PolicyKind::kLru, PolicyKind::kLfu, PolicyKind::kScore,
                            PolicyKind::kCar}) {
    SCOPED_TRACE(PolicyName(policy));
    auto c = Make(policy, 3000, 5000, policy == PolicyKind::kCar ? 0.9 : 0);
    std::mt19937 rng(7);
    std::map<uint64_t, uint64_t> size_of;  // a chunk's size never changes while it exists
    std::vector<Pin> pins;
    for (int i = 0; i < 20000; ++i) {
      const uint64_t key = rng() % 200;
      const int op = static_cast<int>(rng() % 10);
      if (op < 7) {
        if (!size_of.count(key)) size_of[key] = 50 + rng() % 400;
        Pin p = c->Access(key, rng() % 65, 64);
        if (p.tier() == Tier::kDisk) {
          p = c->Admit(key, size_of[key], Bytes(8, static_cast<char>(key)));
          ASSERT_NE(p.data(), nullptr);
          ASSERT_EQ((*p.data())[0], static_cast<char>(key));
        } else if (p.data()) {
          ASSERT_EQ((*p.data())[0], static_cast<char>(key));
        }
        if (rng() % 4 == 0) pins.push_back(std::move(p));
      } else if (op < 8) {
        c->Erase(key);
        size_of.erase(key);
      } else if (op < 9 && !pins.empty()) {
        pins.erase(pins.begin() + static_cast<long>(rng() % pins.size()));
      } else {
        c->OnRequestEvent({&key, 1}, static_cast<RequestEvent>(rng() % 3));
      }
      if (pins.size() > 8) pins.erase(pins.begin());
      if (i % 500 == 0) {
        ASSERT_THAT(c->TEST_Validate(), IsOk()) << "after op " << i;
      }
    }
    pins.clear();
    c->TEST_WaitForOffload();
    EXPECT_THAT(c->TEST_Validate(), IsOk());
  }
}

TEST(TieredCacheTest, ConcurrentRequestsSeeTheirOwnBytes) {
  auto c = Make(PolicyKind::kScore, 20 * 256, 40 * 256, 0.9);
  std::atomic<bool> bad{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t + 1);
      for (int i = 0; i < 20000; ++i) {
        const uint64_t key = rng() % 100;
        Pin p = c->Access(key, rng() % 17, 16);
        if (p.tier() == Tier::kDisk) p = c->Admit(key, 256, Bytes(256, static_cast<char>(key)));
        if (!p.data() || p.data()->size() != 256 || (*p.data())[255] != static_cast<char>(key)) {
          bad = true;
        }
        if (i % 97 == 0) c->Erase(rng() % 100);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_FALSE(bad);
  c->TEST_WaitForOffload();
  EXPECT_THAT(c->TEST_Validate(), IsOk());
}

// Must-show 5: on a Zipf trace with importance independent of popularity,
// score keeps more of the requested important rows on the device than lfu
// and lru (same trace, same pool sizes).
TEST(PolicyTraceTest, ScoreBeatsLfuAndLruOnImportantRowDeviceHits) {
  sim::PolicyTraceOptions o;
  o.accesses = 100000;
  o.policies = {"lru", "lfu", "score", "car"};
  ASSERT_OK_AND_ASSIGN(auto r, sim::RunPolicyTrace(o));
  ASSERT_EQ(r.size(), 4u);
  for (const auto& x : r) {
    std::printf("%-6s device hit ratio of important rows %.3f (chunks %.3f)\n", x.policy.c_str(),
                x.device_important_hit_ratio, x.device_hit_ratio);
  }
  const double lru = r[0].device_important_hit_ratio, lfu = r[1].device_important_hit_ratio,
               score = r[2].device_important_hit_ratio;
  EXPECT_GT(score, lfu);
  EXPECT_GT(score, lru);
  EXPECT_GT(lfu, lru);  // Zipf popularity is stationary: frequency beats recency
  EXPECT_GT(r[1].device_hit_ratio, r[2].device_hit_ratio - 0.05);  // lfu wins on plain chunk hits
}

TEST(PolicyTraceTest, RejectsBadOptions) {
  sim::PolicyTraceOptions o;
  o.policies = {"lru", "mru"};
  EXPECT_THAT(sim::RunPolicyTrace(o), StatusIs(StatusCode::kInvalidArgument, "mru"));
  o = sim::PolicyTraceOptions();
  o.device_fraction = 0.9;
  o.host_fraction = 0.2;
  EXPECT_THAT(sim::RunPolicyTrace(o), StatusIs(StatusCode::kInvalidArgument, "device_fraction"));
}

TEST(TieredCacheTest, ReplaceSwapsTheBytesKeepsStatisticsAndOldPinsKeepTheirCopy) {
  auto c = Make(PolicyKind::kLfu, 100, 200);
  Pin old = c->Access(1, 1, 4);
  old = c->Admit(1, 40, Bytes(40, 'a'));
  ASSERT_EQ(old.tier(), Tier::kDevice);
  { Pin p = c->Access(1, 2, 4); }  // two accesses now
  // The chunk gained rows: 90 bytes still fit the device.
  Pin grown = c->Replace(1, 90, Bytes(90, 'b'));
  EXPECT_EQ(grown.tier(), Tier::kDevice);
  EXPECT_EQ(grown.data()->size(), 90u);
  EXPECT_EQ(old.data()->size(), 40u);  // the pin taken before keeps its buffer
  EXPECT_EQ((*old.data())[0], 'a');
  EXPECT_EQ(c->stats().device_used, 90u);
  EXPECT_THAT(c->TEST_Validate(), IsOk());
  old.Release();
  grown.Release();
  // Too large for the device now: it goes to the host, its LFU count intact
  // (a chunk accessed once cannot displace it from the host).
  Pin big = c->Replace(1, 150, Bytes(150, 'c'));
  EXPECT_EQ(big.tier(), Tier::kHost);
  big.Release();
  EXPECT_EQ(c->stats().device_used, 0u);
  { Pin p = c->Access(2, 1, 1); p = c->Admit(2, 100, Bytes(100, 'd')); }
  EXPECT_EQ(c->TierOf(2), Tier::kDevice);
  { Pin p = c->Access(3, 1, 1); p = c->Admit(3, 100, Bytes(100, 'e')); }
  EXPECT_EQ(c->TierOf(3), Tier::kDevice);
  // 2, demoted, could not displace 1 from the host: 1 kept its three accesses.
  EXPECT_EQ(c->TierOf(1), Tier::kHost);
  EXPECT_EQ(c->TierOf(2), Tier::kDisk);
  EXPECT_THAT(c->TEST_Validate(), IsOk());
}

TEST(TieredCacheTest, PeekPinsTheCopyWithoutCountingAnAccess) {
  auto c = Make(PolicyKind::kLfu, 100, 0);  // one chunk of 100 on the device, no host
  EXPECT_EQ(c->Peek(1).tier(), Tier::kDisk);  // not cached: nothing, and nothing counted
  EXPECT_EQ(c->stats().accesses, 0u);
  { Pin p = c->Access(1, 1, 1); p = c->Admit(1, 100, Bytes(100, 'a')); }
  { Pin p = c->Access(1, 1, 1); }  // 1 has two accesses
  { Pin p = c->Access(2, 1, 1); p = c->Admit(2, 100, Bytes(100, 'b')); }
  EXPECT_EQ(c->TierOf(1), Tier::kDevice);  // 2, accessed once, could not displace it
  const uint64_t accesses = c->stats().accesses;
  // Peeking 1 many times pins its bytes, counts nothing, and does not
  // make 1 any harder to displace.
  for (int i = 0; i < 5; ++i) {
    Pin p = c->Peek(1);
    ASSERT_EQ(p.tier(), Tier::kDevice);
    EXPECT_EQ((*p.data())[0], 'a');
  }
  EXPECT_EQ(c->stats().accesses, accesses);
  { Pin p = c->Access(3, 1, 1); }
  { Pin p = c->Access(3, 1, 1); }
  { Pin p = c->Access(3, 1, 1); p = c->Admit(3, 100, Bytes(100, 'c')); }
  EXPECT_EQ(c->TierOf(3), Tier::kDevice);  // three accesses beat 1's two: peeks did not count
  EXPECT_EQ(c->TierOf(1), Tier::kDisk);
  // A pinned peek keeps its bytes while the chunk leaves the pools.
  Pin held = c->Peek(3);
  c->Erase(3);
  EXPECT_EQ((*held.data())[0], 'c');
  EXPECT_THAT(c->TEST_Validate(), IsOk());
}

// Bytes nobody asked for yet (rows read ahead for nothing) can be kept off
// the device: capped at the host, even with room on the device; the first
// access that finds them there promotes them as any host hit.
TEST(TieredCacheTest, ReplaceCappedAtTheHostLeavesTheDeviceAlone) {
  auto c = Make(PolicyKind::kLfu, 100, 200);
  Pin p = c->Replace(7, 40, Bytes(40, 'a'), Tier::kHost);
  EXPECT_EQ(p.tier(), Tier::kHost);
  p.Release();
  EXPECT_EQ(c->stats().device_used, 0u);
  EXPECT_EQ(c->stats().host_used, 40u);
  Pin hit = c->Access(7, 1, 4);
  EXPECT_EQ(hit.tier(), Tier::kDevice);  // promoted: the device had room
  EXPECT_EQ((*hit.data())[0], 'a');
  EXPECT_THAT(c->TEST_Validate(), IsOk());
}

}  // namespace
}  // namespace tierkv::cache

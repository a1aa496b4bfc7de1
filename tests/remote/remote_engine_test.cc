// The remote tier under the engine, on the default model and real Redis
// servers: a prefix one engine computed is served to another engine with
// its own cache directory through Redis (standalone and a cluster across a
// resharding) with the same logits at retention 1.0; admission; and every
// fault (a damaged value, another model's value under the right key, Redis
// killed, slow, restarted, out of memory) is a miss and a counter, never a
// wrong answer or a failed request.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "engine/model_fixture.h"
#include "remote/redis_conn.h"
#include "remote/remote_tier.h"
#include "store/chunk_store.h"
#include "store/format.h"
#include "store/kv_fixture.h"
#include "testing/redis_server.h"
#include "testing/status_matchers.h"
#include "tierkv/engine.h"

namespace tierkv::engine {
namespace {

using std::chrono::milliseconds;
using store::testing::TempDir;

constexpr size_t kP = 256, kQ = 24;  // four whole chunks of 64 tokens, then the query

class RemoteEngineTest : public DefaultModelTest {
 protected:
  static EngineOptions Options(const std::string& dir, const std::string& url,
                               RemoteAdmit admit = RemoteAdmit::kAlways) {
    EngineOptions o;
    o.system = System::kAsLike;
    o.cache_dir = dir;
    o.chunk_tokens = 64;
    o.calibrate_io = false;
    o.remote.url = url;
    o.remote.admit = admit;
    o.remote.timeout_ms = 300;
    return o;
  }
  static std::vector<int32_t> A() { return Prompt(kP, 1000, kQ); }
  static std::vector<int32_t> B() { return Prompt(kP, 1500, kQ); }
  static ServeOptions FromP() {
    ServeOptions so;
    so.logits_from = kP;
    return so;
  }
  static double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double d = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
    return d;
  }
  // Engine `writer` stores A's prefix and sends it up; returns the logits of
  // B served from writer's own disk tier (the answer a reader must give).
  static std::vector<float> WriteAndReuseLocally(Engine* writer) {
    auto first = writer->Serve(A());
    EXPECT_TRUE(first.ok());
    writer->DrainRemote();
    auto local = writer->Serve(B(), FromP());
    EXPECT_TRUE(local.ok());
    EXPECT_EQ(local->stats.reused_tokens, kP);
    return local->logits;
  }
  // B's logits with nothing reused (no remote tier, an empty directory).
  static std::vector<float> Computed() {
    TempDir dir;
    auto eng = Engine::Open(*model_, Options(dir.path(), ""));
    EXPECT_TRUE(eng.ok());
    auto r = (*eng)->Serve(B(), FromP());
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(r->stats.reused_tokens, 0u);
    return r->logits;
  }
};

TEST_F(RemoteEngineTest, APrefixOneEngineComputedIsServedToAnotherThroughRedisWithTheSameLogits) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  TempDir da, db;
  ASSERT_OK_AND_ASSIGN(auto writer, Engine::Open(*model_, Options(da.path(), redis.url())));
  const std::vector<float> want = WriteAndReuseLocally(writer.get());
  const RemoteStats up = writer->RemoteStatistics();
  EXPECT_EQ(up.uploads, 4u);  // A's whole chunks (its 24-token tail is not a whole chunk)
  EXPECT_EQ(up.errors_total(), 0u);
  EXPECT_EQ(up.dropped_writes, 0u);
  const uint64_t record = writer->TEST_store()->record_bytes(64);
  EXPECT_EQ(up.bytes_up, 4 * 8 * record);

  ASSERT_OK_AND_ASSIGN(auto reader, Engine::Open(*model_, Options(db.path(), redis.url())));
  ASSERT_OK_AND_ASSIGN(ServeResult got, reader->Serve(B(), FromP()));
  EXPECT_EQ(got.stats.remote_chunks, 4u);
  EXPECT_EQ(got.stats.reused_tokens, kP);
  EXPECT_EQ(got.stats.remote_bytes, 4 * 8 * record);
  EXPECT_EQ(got.stats.disk_bytes_read, 0u);  // what came down went into the pools too
  EXPECT_EQ(MaxDiff(got.logits, want), 0.0);  // bit for bit
  const RemoteStats down = reader->RemoteStatistics();
  EXPECT_EQ(down.hits, 4u);
  EXPECT_EQ(down.corrupt, 0u);
  // Admitted locally: the next request reads its own disk, not Redis.
  ASSERT_OK_AND_ASSIGN(ServeResult again, reader->Serve(B(), FromP()));
  EXPECT_EQ(again.stats.remote_chunks, 0u);
  EXPECT_EQ(again.stats.reused_tokens, kP);
  EXPECT_EQ(MaxDiff(again.logits, want), 0.0);
  // A reader of another model namespace (another chunk size) finds nothing.
  TempDir dc;
  EngineOptions other = Options(dc.path(), redis.url());
  other.chunk_tokens = 32;
  ASSERT_OK_AND_ASSIGN(auto stranger, Engine::Open(*model_, other));
  ASSERT_OK_AND_ASSIGN(ServeResult none, stranger->Serve(B(), FromP()));
  EXPECT_EQ(none.stats.remote_chunks, 0u);
  EXPECT_EQ(none.stats.reused_tokens, 0u);
}

TEST_F(RemoteEngineTest, ByDefaultOnlyChunksReusedTwiceLocallyGoUp) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  TempDir da;
  ASSERT_OK_AND_ASSIGN(auto eng, Engine::Open(*model_, Options(da.path(), redis.url(), RemoteAdmit::kReused)));
  ASSERT_TRUE(eng->Serve(A()).ok());
  eng->DrainRemote();
  EXPECT_EQ(eng->RemoteStatistics().uploads, 0u);  // stored, never reused
  ASSERT_TRUE(eng->Serve(B(), FromP()).ok());
  eng->DrainRemote();
  EXPECT_EQ(eng->RemoteStatistics().uploads, 0u);  // reused once
  ASSERT_TRUE(eng->Serve(B(), FromP()).ok());
  eng->DrainRemote();
  EXPECT_EQ(eng->RemoteStatistics().uploads, 4u);  // reused twice: up
  ASSERT_TRUE(eng->Serve(B(), FromP()).ok());
  eng->DrainRemote();
  EXPECT_EQ(eng->RemoteStatistics().uploads, 4u);  // once only
  EXPECT_EQ(redis.Cli("DBSIZE"), "32\n");  // 4 chunks x 8 layers
}

TEST_F(RemoteEngineTest, ADamagedValueOrAnotherModelsValueIsAMissNeverServed) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  TempDir da, db, dc;
  ASSERT_OK_AND_ASSIGN(auto writer, Engine::Open(*model_, Options(da.path(), redis.url())));
  const std::vector<float> want = WriteAndReuseLocally(writer.get());
  // The keys of A's chunks, from the writer's own index.
  const store::LookupResult m = writer->TEST_store()->Lookup(A());
  ASSERT_GE(m.prefix_hashes.size(), 4u);
  remote::RedisConn conn({"127.0.0.1", redis.port()}, milliseconds(1000));
  std::vector<remote::Reply> r;
  remote::ErrorKind kind;
  // Chunk 2, layer 5: one payload byte flipped.
  const std::vector<remote::Command> keys = {{"KEYS", "tierkv:*"}};
  ASSERT_TRUE(conn.Pipeline(keys, &r, &kind).ok());
  ASSERT_EQ(r[0].elements.size(), 32u);
  const std::string some_key = r[0].elements[0].str;
  const uint64_t fingerprint = std::stoull(some_key.substr(8, 16), nullptr, 16);
  const std::string k2 = remote::ChunkKey(fingerprint, m.prefix_hashes[2], 5);
  const std::vector<remote::Command> get = {{"GET", k2}};
  ASSERT_TRUE(conn.Pipeline(get, &r, &kind).ok());
  std::string damaged = r[0].str;
  ASSERT_GT(damaged.size(), store::kBlockSize + 300);
  damaged[store::kBlockSize + 300] ^= 0x10;
  std::vector<remote::Command> set = {{"SET", k2, damaged}};
  ASSERT_TRUE(conn.Pipeline(set, &r, &kind).ok());

  ASSERT_OK_AND_ASSIGN(auto reader, Engine::Open(*model_, Options(db.path(), redis.url())));
  ASSERT_OK_AND_ASSIGN(ServeResult got, reader->Serve(B(), FromP()));
  EXPECT_EQ(got.stats.remote_chunks, 2u);  // chunks 0 and 1; 2 fails, so 3 is no use
  EXPECT_EQ(got.stats.reused_tokens, 128u);
  EXPECT_EQ(reader->RemoteStatistics().corrupt, 1u);
  // The same answer as the writer gives reusing the same 128 rows of its
  // own store (the same rows, the same computation: bit for bit).
  ServeOptions at128;
  at128.logits_from = 128;
  ASSERT_OK_AND_ASSIGN(ServeResult ref, writer->Serve(B(), at128));
  ASSERT_EQ(ref.stats.reused_tokens, 128u);
  const size_t V = static_cast<size_t>(model_->config().vocab_size);
  const std::vector<float> tail(ref.logits.end() - static_cast<std::ptrdiff_t>(kQ * V), ref.logits.end());
  EXPECT_EQ(MaxDiff(got.logits, tail), 0.0);

  // Another model's record under chunk 0's key: right key, wrong fingerprint.
  const std::string k0 = remote::ChunkKey(fingerprint, m.prefix_hashes[0], 0);
  const std::vector<remote::Command> get0 = {{"GET", k0}};
  ASSERT_TRUE(conn.Pipeline(get0, &r, &kind).ok());
  std::span<const char, store::kBlockSize> block(r[0].str.data(), store::kBlockSize);
  ASSERT_OK_AND_ASSIGN(store::RecordHeader h, store::DecodeHeader(block));
  h.fingerprint ^= 1;
  std::string foreign;
  store::EncodeRecord(h, std::span(r[0].str).subspan(store::kBlockSize, h.payload_bytes), &foreign);
  set = {{"SET", k0, foreign}};
  ASSERT_TRUE(conn.Pipeline(set, &r, &kind).ok());
  ASSERT_OK_AND_ASSIGN(auto third, Engine::Open(*model_, Options(dc.path(), redis.url())));
  ASSERT_OK_AND_ASSIGN(ServeResult none, third->Serve(B(), FromP()));
  EXPECT_EQ(none.stats.remote_chunks, 0u);
  EXPECT_EQ(none.stats.reused_tokens, 0u);
  EXPECT_EQ(third->RemoteStatistics().corrupt, 1u);
  EXPECT_EQ(MaxDiff(none.logits, Computed()), 0.0);
}

TEST_F(RemoteEngineTest, RedisKilledSlowRestartedOrFullIsAMissAndACounter) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  TempDir da, db;
  ASSERT_OK_AND_ASSIGN(auto writer, Engine::Open(*model_, Options(da.path(), redis.url())));
  WriteAndReuseLocally(writer.get());
  const std::vector<float> computed = Computed();

  // Killed: the reader computes everything, at once, and counts the error.
  redis.Kill();
  ASSERT_OK_AND_ASSIGN(auto reader, Engine::Open(*model_, Options(db.path(), redis.url())));
  ASSERT_OK_AND_ASSIGN(ServeResult dead, reader->Serve(B(), FromP()));
  EXPECT_LT(dead.stats.remote_ms, 300.0 + 50);
  EXPECT_EQ(dead.stats.remote_chunks, 0u);
  EXPECT_EQ(MaxDiff(dead.logits, computed), 0.0);
  EXPECT_GE(reader->RemoteStatistics().errors[0], 1u);  // connect
  reader->DrainRemote();  // its write of B's chunks fails now, not after the restart
  EXPECT_EQ(reader->RemoteStatistics().uploads, 0u);

  // Restarted (empty: no persistence): misses, then uploads again.
  redis.Start();
  std::this_thread::sleep_for(milliseconds(2100));  // past the longest backoff
  TempDir dc;
  ASSERT_OK_AND_ASSIGN(auto fresh, Engine::Open(*model_, Options(dc.path(), redis.url())));
  ASSERT_OK_AND_ASSIGN(ServeResult miss, fresh->Serve(B(), FromP()));
  EXPECT_EQ(miss.stats.remote_chunks, 0u);
  EXPECT_EQ(fresh->RemoteStatistics().misses, 1u);
  EXPECT_EQ(fresh->RemoteStatistics().errors_total(), 0u);
  fresh->DrainRemote();
  EXPECT_GT(fresh->RemoteStatistics().uploads, 0u);

  // Slow: a DEBUG SLEEP longer than the timeout; the request goes on after
  // the timeout, computing what it could not fetch.
  TempDir dd;
  ASSERT_OK_AND_ASSIGN(auto slow, Engine::Open(*model_, Options(dd.path(), redis.url())));
  std::thread sleeper([&] { redis.Cli("DEBUG SLEEP 2"); });
  std::this_thread::sleep_for(milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_OK_AND_ASSIGN(ServeResult late, slow->Serve(B(), FromP()));
  const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  sleeper.join();
  EXPECT_LT(late.stats.remote_ms, 300.0 + 100);
  EXPECT_LT(wall, 1800.0);  // never the server's 2 s
  EXPECT_EQ(late.stats.remote_chunks, 0u);
  EXPECT_GE(slow->RemoteStatistics().errors[1], 1u);  // timeout
  EXPECT_EQ(MaxDiff(late.logits, computed), 0.0);
}

TEST_F(RemoteEngineTest, AFullRedisRefusesWritesAndRequestsGoOn) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis({"--maxmemory", "1mb", "--maxmemory-policy", "noeviction"});
  TempDir da;
  ASSERT_OK_AND_ASSIGN(auto writer, Engine::Open(*model_, Options(da.path(), redis.url())));
  ASSERT_TRUE(writer->Serve(A()).ok());
  writer->DrainRemote();
  const RemoteStats s = writer->RemoteStatistics();
  EXPECT_GE(s.errors[3], 1u);  // oom
  EXPECT_LT(s.uploads, 4u);
  ASSERT_OK_AND_ASSIGN(ServeResult local, writer->Serve(B(), FromP()));
  EXPECT_EQ(local.stats.reused_tokens, kP);
}

TEST_F(RemoteEngineTest, AClusterServesThePrefixAfterAReshardingMovedItsChunks) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisCluster cluster;
  TempDir da, db;
  ASSERT_OK_AND_ASSIGN(auto writer, Engine::Open(*model_, Options(da.path(), cluster.url())));
  const std::vector<float> want = WriteAndReuseLocally(writer.get());
  ASSERT_EQ(writer->RemoteStatistics().uploads, 4u);
  // Move every slot of a node that holds chunks to another node.
  int from = 0;
  while (from < 3 && cluster.node(from).Cli("DBSIZE") == "0\n") ++from;
  ASSERT_LT(from, 3);
  // A chunk's layers share a hash tag: one node holds all 8 of them.
  EXPECT_EQ(std::stoi(cluster.node(from).Cli("DBSIZE")) % 8, 0);
  cluster.Reshard(from, (from + 1) % 3, 5461);
  ASSERT_OK_AND_ASSIGN(auto reader, Engine::Open(*model_, Options(db.path(), cluster.url())));
  ASSERT_OK_AND_ASSIGN(ServeResult got, reader->Serve(B(), FromP()));
  EXPECT_EQ(got.stats.remote_chunks, 4u);
  EXPECT_EQ(MaxDiff(got.logits, want), 0.0);
  EXPECT_EQ(reader->RemoteStatistics().errors_total(), 0u);
  // The writer's slot map is stale now: its next writes (two new chunks)
  // land where the slots are now.
  ASSERT_TRUE(writer->Serve(Prompt(kP + 128, 2000, kQ)).ok());
  writer->DrainRemote();
  EXPECT_EQ(writer->RemoteStatistics().uploads, 6u);
  EXPECT_EQ(writer->RemoteStatistics().errors_total(), 0u);
}

}  // namespace
}  // namespace tierkv::engine

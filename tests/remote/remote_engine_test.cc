// The remote tier under the engine, on the default model and real Redis
// servers: a prefix one engine computed is served to another engine with
// its own cache directory through Redis (standalone and a cluster across a
// resharding) with the same logits at retention 1.0; admission; and every
// fault (a damaged value, another model's value under the right key, Redis
// killed, slow, restarted, out of memory) is a miss and a counter, never a
// wrong answer or a failed request.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/model_fixture.h"
#include "remote/redis_conn.h"
#include "remote/redis_url.h"
#include "remote/remote_tier.h"
#include "remote/seal.h"
#include "remote/value.h"
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
    o.disk.calibrate_io = false;
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
  // The headers of the values of `hashes`' chunks, all layers (GETRANGE of
  // each header block): what order each value was written in.
  static std::vector<std::vector<store::RecordHeader>> ValueHeaders(int port, uint64_t fingerprint,
                                                                    const std::vector<uint64_t>& hashes) {
    remote::RedisConn conn({"127.0.0.1", port}, milliseconds(1000));
    std::vector<remote::Command> cmds;
    for (uint64_t h : hashes) {
      for (uint16_t l = 0; l < 8; ++l) cmds.push_back({"GETRANGE", remote::ChunkKey(fingerprint, h, l), "0", "4095"});
    }
    std::vector<remote::Reply> r;
    remote::ErrorKind kind;
    EXPECT_TRUE(conn.Pipeline(cmds, &r, &kind).ok());
    std::vector<std::vector<store::RecordHeader>> out(hashes.size());
    for (size_t i = 0; i < r.size(); ++i) {
      EXPECT_EQ(r[i].str.size(), store::kBlockSize);
      auto h = store::DecodeHeader(std::span<const char, store::kBlockSize>(r[i].str.data(), store::kBlockSize));
      EXPECT_TRUE(h.ok());
      out[i / 8].push_back(h.ok() ? *h : store::RecordHeader{});
    }
    return out;
  }
  // The rows a reader of the important part attends to in chunks [0, n):
  // per layer, each value's first `keep` rows in its own order, or all its
  // rows when it is in token order.
  static std::vector<std::vector<int32_t>> FarPositions(const std::vector<std::vector<store::RecordHeader>>& h,
                                                        size_t n, size_t keep) {
    std::vector<std::vector<int32_t>> pos(8);
    for (size_t i = 0; i < n; ++i) {
      for (size_t l = 0; l < 8; ++l) {
        const bool ordered = h[i][l].kind == store::RecordKind::kReorderedKeyValue;
        const size_t take = ordered ? keep : h[i][l].token_count;
        for (size_t j = 0; j < take; ++j) {
          pos[l].push_back(ordered ? h[i][l].tokens[j] : static_cast<int32_t>(h[i][l].first_token + j));
        }
      }
    }
    return pos;
  }
  // B's logits from position `end` on, by the model alone, each layer
  // attending to exactly the prefix rows `pos[layer]` (in that order) of
  // the K/V A's own forward pass computed: what the writer stored.
  static std::vector<float> AttendingTo(const std::vector<std::vector<int32_t>>& pos, size_t end) {
    const ModelConfig& c = model_->config();
    PrefillOptions full;
    full.capture_kv = true;
    full.kv_dtype = KvDType::kF16;
    full.logits = LogitsMode::kNone;
    auto a = model_->Prefill(A(), full);
    EXPECT_TRUE(a.ok());
    const size_t rb = static_cast<size_t>(c.kv_dim()) * 2, hb = static_cast<size_t>(c.head_dim()) * 2;
    std::vector<std::string> k(c.n_layers), v(c.n_layers);
    PrefillOptions po;
    po.start_pos = static_cast<int>(end);
    po.logits = LogitsMode::kAll;
    po.before_attention = [&](const LayerView& view, LayerPrefix* prefix) -> Status {
      const int l = view.layer;
      for (int32_t p : pos[l]) {
        k[l].append(reinterpret_cast<const char*>(a->kv[l].k.data()) + p * rb, rb);
        v[l].append(reinterpret_cast<const char*>(a->kv[l].v.data()) + p * rb, rb);
      }
      prefix->heads.resize(c.n_kv_heads);
      for (int h = 0; h < c.n_kv_heads; ++h) {
        prefix->heads[h] = KvRows{k[l].data() + h * hb, v[l].data() + h * hb, KvDType::kF16, pos[l].size(),
                                  static_cast<size_t>(c.kv_dim()), static_cast<size_t>(c.kv_dim()), pos[l].data()};
      }
      return Status::Ok();
    };
    const std::vector<int32_t> b = B();
    auto r = model_->Prefill(std::span(b).subspan(end), po);
    EXPECT_TRUE(r.ok());
    const size_t V = static_cast<size_t>(c.vocab_size);
    return std::vector<float>(r->logits.end() - static_cast<std::ptrdiff_t>(kQ * V), r->logits.end());
  }
  static EngineOptions ImportantReader(const std::string& dir, const std::string& url) {
    EngineOptions o = Options(dir, url);
    o.system = System::kImpress;
    o.retention = 0.25;
    o.remote.read = RemoteRead::kImportant;
    return o;
  }
  // How many chunks `redis` holds every layer of (KEYS: a test's small server).
  static uint64_t ChunksWithEveryLayer(const testing::RedisServer& redis, const std::string& cli_args) {
    std::map<std::string, int> layers;
    std::istringstream keys(redis.Cli(cli_args + " --no-auth-warning KEYS 'tierkv:*'"));
    for (std::string k; std::getline(keys, k);) {
      if (k.starts_with("tierkv:")) ++layers[k.substr(0, k.rfind(':'))];
    }
    uint64_t n = 0;
    for (const auto& [chunk, count] : layers) n += count == 8 ? 1 : 0;
    return n;
  }
  static size_t Count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }
  static uint64_t FingerprintOf(const testing::RedisServer& redis) {
    remote::RedisConn conn({"127.0.0.1", redis.port()}, milliseconds(1000));
    std::vector<remote::Reply> r;
    remote::ErrorKind kind;
    const std::vector<remote::Command> keys = {{"RANDOMKEY"}};
    EXPECT_TRUE(conn.Pipeline(keys, &r, &kind).ok());
    EXPECT_EQ(r[0].str.substr(0, 8), "tierkv:{");
    return r[0].str.size() > 24 ? std::stoull(r[0].str.substr(8, 16), nullptr, 16) : 0;
  }
};

// A value's bytes in Redis: the record and its seal (src/remote/seal.h).
uint64_t SealedBytes(uint64_t record) { return record + remote::Sealer::SealBytes(record / store::kBlockSize - 1); }

// The tests' shared key (testing::kTestRemoteKey), for values a test writes
// as a server of the same deployment would.
remote::Sealer TestSealer() { return *remote::Sealer::FromKeys({testing::kTestRemoteKey}); }

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
  EXPECT_EQ(up.bytes_up, 4 * 8 * SealedBytes(record));

  ASSERT_OK_AND_ASSIGN(auto reader, Engine::Open(*model_, Options(db.path(), redis.url())));
  // The reader has stored a prompt of its own sharing B's first 10 tokens
  // (as every prompt shares BOS): its match ends inside chunk 0, and the
  // fetch starts at that chunk, not after it.
  ASSERT_OK_AND_ASSIGN(ServeResult own, reader->Serve(Prompt(10, 3000, 100)));
  EXPECT_EQ(own.stats.remote_chunks, 0u);
  ASSERT_EQ(reader->TEST_store()->Lookup(B()).matched_tokens, 10u);
  ASSERT_OK_AND_ASSIGN(ServeResult got, reader->Serve(B(), FromP()));
  EXPECT_EQ(got.stats.remote_chunks, 4u);
  EXPECT_EQ(got.stats.reused_tokens, kP);
  EXPECT_EQ(got.stats.remote_bytes, 4 * 8 * SealedBytes(record));
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
  EXPECT_EQ(reader->RemoteStatistics().rejected, 1u);  // its seal's page digest caught it first
  // The same answer as the writer gives reusing the same 128 rows of its
  // own store (the same rows, the same computation: bit for bit).
  ServeOptions at128;
  at128.logits_from = 128;
  ASSERT_OK_AND_ASSIGN(ServeResult ref, writer->Serve(B(), at128));
  ASSERT_EQ(ref.stats.reused_tokens, 128u);
  const size_t V = static_cast<size_t>(model_->config().vocab_size);
  const std::vector<float> tail(ref.logits.end() - static_cast<std::ptrdiff_t>(kQ * V), ref.logits.end());
  EXPECT_EQ(MaxDiff(got.logits, tail), 0.0);

  // Another model's record under chunk 0's key: right key, wrong
  // fingerprint, sealed with the shared key (a server of the same
  // deployment serving another model): the seal holds, the identity fails.
  const std::string k0 = remote::ChunkKey(fingerprint, m.prefix_hashes[0], 0);
  const std::vector<remote::Command> get0 = {{"GET", k0}};
  ASSERT_TRUE(conn.Pipeline(get0, &r, &kind).ok());
  std::span<const char, store::kBlockSize> block(r[0].str.data(), store::kBlockSize);
  ASSERT_OK_AND_ASSIGN(store::RecordHeader h, store::DecodeHeader(block));
  h.fingerprint ^= 1;
  std::string foreign;
  store::EncodeRecord(h, std::span(r[0].str).subspan(store::kBlockSize, h.payload_bytes), &foreign);
  TestSealer().Seal(k0, &foreign);
  set = {{"SET", k0, foreign}};
  ASSERT_TRUE(conn.Pipeline(set, &r, &kind).ok());
  ASSERT_OK_AND_ASSIGN(auto third, Engine::Open(*model_, Options(dc.path(), redis.url())));
  ASSERT_OK_AND_ASSIGN(ServeResult none, third->Serve(B(), FromP()));
  EXPECT_EQ(none.stats.remote_chunks, 0u);
  EXPECT_EQ(none.stats.reused_tokens, 0u);
  EXPECT_EQ(third->RemoteStatistics().corrupt, 1u);
  EXPECT_EQ(third->RemoteStatistics().rejected, 0u);
  EXPECT_EQ(MaxDiff(none.logits, Computed()), 0.0);
}

// Issue 57 (2): anyone who can write to the Redis can take a value, change
// its K/V (here: the sign of every fp16 element), recompute the record's
// checksums (unkeyed XXH3 with a public seed) and write it back; or copy a
// genuine value under another key. Neither has the shared key's seal: both
// are rejected (counted), the run stops before them, and the answer is the
// clean one. A value sealed with another deployment's key is a miss.
TEST_F(RemoteEngineTest, AForgedOrCopiedValueIsRejectedAndAnotherDeploymentsIsAMiss) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  TempDir da, db, dc, dd;  // readers admit `reused`: nothing of theirs goes up over the forgeries
  ASSERT_OK_AND_ASSIGN(auto writer, Engine::Open(*model_, Options(da.path(), redis.url())));
  WriteAndReuseLocally(writer.get());
  const store::LookupResult m = writer->TEST_store()->Lookup(A());
  ASSERT_GE(m.prefix_hashes.size(), 4u);
  const uint64_t fp = FingerprintOf(redis);
  remote::RedisConn conn({"127.0.0.1", redis.port()}, milliseconds(1000));
  std::vector<remote::Reply> r;
  remote::ErrorKind kind;
  const auto get = [&](const std::string& key) {
    const std::vector<remote::Command> c = {{"GET", key}};
    EXPECT_TRUE(conn.Pipeline(c, &r, &kind).ok());
    return r[0].str;
  };
  const auto set = [&](const std::string& key, const std::string& value) {
    const std::vector<remote::Command> c = {{"SET", key, value}};
    EXPECT_TRUE(conn.Pipeline(c, &r, &kind).ok());
  };
  // The answer reusing chunk 0 alone, from the writer's own store.
  ServeOptions at64;
  at64.logits_from = 64;
  ASSERT_OK_AND_ASSIGN(ServeResult ref, writer->Serve(B(), at64));
  ASSERT_EQ(ref.stats.reused_tokens, 64u);
  const size_t V = static_cast<size_t>(model_->config().vocab_size);
  const std::vector<float> clean(ref.logits.end() - static_cast<std::ptrdiff_t>(kQ * V), ref.logits.end());

  // The sign-flip forgery of chunk 1, layer 2, checksums recomputed.
  const std::string k12 = remote::ChunkKey(fp, m.prefix_hashes[1], 2);
  const std::string genuine = get(k12);
  std::span<const char, store::kBlockSize> block(genuine.data(), store::kBlockSize);
  ASSERT_OK_AND_ASSIGN(store::RecordHeader h, store::DecodeHeader(block));
  std::string payload = genuine.substr(store::kBlockSize, h.payload_bytes);
  for (size_t i = 1; i < payload.size(); i += 2) payload[i] ^= static_cast<char>(0x80);
  std::string forged;
  store::EncodeRecord(h, payload, &forged);
  const std::string seal = genuine.substr(forged.size());
  ASSERT_EQ(seal.size(), remote::Sealer::SealBytes(static_cast<uint32_t>(h.page_checksums.size())));
  set(k12, forged + seal);
  ASSERT_OK_AND_ASSIGN(auto reader, Engine::Open(*model_, Options(db.path(), redis.url(), RemoteAdmit::kReused)));
  ASSERT_OK_AND_ASSIGN(ServeResult got, reader->Serve(B(), FromP()));
  EXPECT_EQ(got.stats.remote_chunks, 1u);
  EXPECT_EQ(got.stats.reused_tokens, 64u);
  EXPECT_EQ(reader->RemoteStatistics().rejected, 1u);
  EXPECT_EQ(MaxDiff(got.logits, clean), 0.0);

  // A genuine value copied under another key: chunk 1 layer 3's as layer 2's.
  set(k12, get(remote::ChunkKey(fp, m.prefix_hashes[1], 3)));
  ASSERT_OK_AND_ASSIGN(auto reader2, Engine::Open(*model_, Options(dc.path(), redis.url(), RemoteAdmit::kReused)));
  ASSERT_OK_AND_ASSIGN(ServeResult copied, reader2->Serve(B(), FromP()));
  EXPECT_EQ(copied.stats.reused_tokens, 64u);
  EXPECT_EQ(reader2->RemoteStatistics().rejected, 1u);
  EXPECT_EQ(MaxDiff(copied.logits, clean), 0.0);

  // The forgery sealed with a key of the attacker's own (another
  // deployment's): not ours, a miss, neither rejected nor corrupt.
  std::string other = forged;
  ASSERT_OK_AND_ASSIGN(remote::Sealer theirs, remote::Sealer::FromKeys({"another-deployment-key-0000000000"}));
  theirs.Seal(k12, &other);
  set(k12, other);
  ASSERT_OK_AND_ASSIGN(auto reader3, Engine::Open(*model_, Options(dd.path(), redis.url(), RemoteAdmit::kReused)));
  ASSERT_OK_AND_ASSIGN(ServeResult foreign, reader3->Serve(B(), FromP()));
  EXPECT_EQ(foreign.stats.reused_tokens, 64u);
  const RemoteStats rs3 = reader3->RemoteStatistics();
  EXPECT_EQ(rs3.unsealed, 1u);
  EXPECT_EQ(rs3.rejected, 0u);
  EXPECT_EQ(rs3.corrupt, 0u);
  EXPECT_EQ(MaxDiff(foreign.logits, clean), 0.0);
}

// A remote tier opens only with a key: without one the engine says how to
// give it, and a key file others can read is refused.
TEST_F(RemoteEngineTest, ARemoteTierWithoutAKeyDoesNotOpen) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  TempDir da, keys;
  const std::string saved = std::getenv(remote::kRemoteKeyEnv);
  ::unsetenv(remote::kRemoteKeyEnv);
  auto none = Engine::Open(*model_, Options(da.path(), redis.url()));
  ::setenv(remote::kRemoteKeyEnv, saved.c_str(), 1);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--remote-key-file"), std::string::npos) << none.status().ToString();
  const std::string file = keys.path() + "/key";
  std::ofstream(file) << "# rotation: the first line seals\n" << testing::kTestRemoteKey << "\n";
  ::chmod(file.c_str(), 0644);
  EngineOptions o = Options(da.path(), redis.url());
  o.remote.key_file = file;
  auto open = Engine::Open(*model_, o);
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.status().message().find("chmod 600"), std::string::npos) << open.status().ToString();
  ::chmod(file.c_str(), 0600);
  EXPECT_TRUE(Engine::Open(*model_, o).ok());
}

// Must-show 4: values written in the writer's importance order; a reader at
// retention 0.25 fetches, of each chunk layer, the header and the pages of
// its first quarter of K and V rows, and attends to exactly those rows.
TEST_F(RemoteEngineTest, AReaderAtAQuarterFetchesOnlyTheImportantRowsOfEachChunkLayer) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  TempDir da, db;
  EngineOptions wo = Options(da.path(), redis.url());
  wo.system = System::kImpress;
  wo.store_order = StoreOrder::kOn;  // packed at store: the order the values go up in
  ASSERT_OK_AND_ASSIGN(auto writer, Engine::Open(*model_, wo));
  ASSERT_TRUE(writer->Serve(A()).ok());
  writer->DrainRemote();
  ASSERT_EQ(writer->RemoteStatistics().uploads, 4u);
  const store::LookupResult m = writer->TEST_store()->Lookup(A());
  const std::vector<uint64_t> hashes(m.prefix_hashes.begin(), m.prefix_hashes.begin() + 4);
  const auto headers = ValueHeaders(redis.port(), FingerprintOf(redis), hashes);
  for (size_t i = 0; i < 4; ++i) {
    const std::vector<std::vector<uint16_t>> order = writer->TEST_store()->RowOrder(m.chunks[i], hashes[i]);
    ASSERT_EQ(order.size(), 8u);
    for (size_t l = 0; l < 8; ++l) {
      ASSERT_EQ(headers[i][l].kind, store::RecordKind::kReorderedKeyValue) << "chunk " << i << " layer " << l;
      // In whole pages (8 rows of 512 bytes: the default selection unit).
      const std::vector<uint16_t> by_page = remote::UnitOrder(order[l], 8);
      for (size_t j = 0; j < 64; ++j) EXPECT_EQ(headers[i][l].tokens[j], static_cast<int32_t>(i * 64 + by_page[j]));
    }
  }

  ASSERT_OK_AND_ASSIGN(auto reader, Engine::Open(*model_, ImportantReader(db.path(), redis.url())));
  ASSERT_OK_AND_ASSIGN(ServeResult got, reader->Serve(B(), FromP()));
  EXPECT_EQ(got.stats.remote_important_chunks, 4u);
  EXPECT_EQ(got.stats.remote_chunks, 0u);
  EXPECT_EQ(got.stats.reused_tokens, kP);
  EXPECT_EQ(got.stats.computed_tokens, kQ);
  EXPECT_EQ(got.stats.disk_bytes_read, 0u);
  EXPECT_EQ(got.stats.stored_chunks, 0u);  // rows read in part are not a chunk to store
  // 16 of 64 rows: the header block, then K's and V's first pages.
  const uint64_t rb = static_cast<uint64_t>(model_->config().kv_dim()) * 2;
  const uint64_t part = store::kBlockSize * (1 + 2 * ((16 * rb + store::kBlockSize - 1) / store::kBlockSize));
  const uint64_t record = writer->TEST_store()->record_bytes(64);
  EXPECT_EQ(got.stats.remote_bytes, 4 * 8 * part);
  const RemoteStats rs = reader->RemoteStatistics();
  EXPECT_EQ(rs.important_chunks, 4u);
  EXPECT_EQ(rs.important_bytes, 4 * 8 * part);
  EXPECT_EQ(rs.important_value_bytes, 4 * 8 * record);
  EXPECT_EQ(rs.corrupt, 0u);
  std::printf("[ partial ] %llu of %llu value bytes fetched (%.1f%%)\n", static_cast<unsigned long long>(rs.important_bytes),
              static_cast<unsigned long long>(rs.important_value_bytes),
              100.0 * static_cast<double>(rs.important_bytes) / static_cast<double>(rs.important_value_bytes));
  // Exactly the writer's rows at the positions each value ranks first.
  EXPECT_EQ(MaxDiff(got.logits, AttendingTo(FarPositions(headers, 4, 16), kP)), 0.0);

  // A reader of whole values takes the ordered ones back to token order.
  TempDir dw;
  ASSERT_OK_AND_ASSIGN(auto whole, Engine::Open(*model_, Options(dw.path(), redis.url())));  // as-like
  ASSERT_OK_AND_ASSIGN(ServeResult all, whole->Serve(B(), FromP()));
  EXPECT_EQ(all.stats.remote_chunks, 4u);
  std::vector<std::vector<int32_t>> every(8);
  for (auto& p : every) {
    for (int32_t t = 0; t < static_cast<int32_t>(kP); ++t) p.push_back(t);
  }
  EXPECT_EQ(MaxDiff(all.logits, AttendingTo(every, kP)), 0.0);

  // A damaged page in the important part of chunk 2: a miss from there on.
  remote::RedisConn conn({"127.0.0.1", redis.port()}, milliseconds(1000));
  std::vector<remote::Reply> r;
  remote::ErrorKind kind;
  const std::string k2 = remote::ChunkKey(FingerprintOf(redis), hashes[2], 5);
  const std::vector<remote::Command> flip = {{"SETRANGE", k2, std::to_string(store::kBlockSize + 64 * rb + 7), "x"}};
  ASSERT_TRUE(conn.Pipeline(flip, &r, &kind).ok());  // V's first page
  TempDir dc;
  ASSERT_OK_AND_ASSIGN(auto third, Engine::Open(*model_, ImportantReader(dc.path(), redis.url())));
  ASSERT_OK_AND_ASSIGN(ServeResult two, third->Serve(B(), FromP()));
  EXPECT_EQ(two.stats.remote_important_chunks, 2u);
  EXPECT_EQ(two.stats.reused_tokens, 128u);
  EXPECT_EQ(third->RemoteStatistics().corrupt, 1u);
  EXPECT_EQ(MaxDiff(two.logits, AttendingTo(FarPositions(headers, 2, 16), 128)), 0.0);
}

// Values without any order (an as-like writer's) are fetched whole and kept
// locally; values whose layers are partly in token order (the writer's
// requests reported importance only where their probes decided) give those
// layers whole.
TEST_F(RemoteEngineTest, AnImportantReaderTakesValuesWithoutAnOrderWhole) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  TempDir da, db;
  ASSERT_OK_AND_ASSIGN(auto writer, Engine::Open(*model_, Options(da.path(), redis.url())));  // as-like
  WriteAndReuseLocally(writer.get());
  ASSERT_OK_AND_ASSIGN(auto reader, Engine::Open(*model_, ImportantReader(db.path(), redis.url())));
  ASSERT_OK_AND_ASSIGN(ServeResult got, reader->Serve(B(), FromP()));
  EXPECT_EQ(got.stats.remote_important_chunks, 0u);
  EXPECT_EQ(got.stats.remote_chunks, 4u);  // whole, into the disk tier
  EXPECT_EQ(got.stats.reused_tokens, kP);

  // An impress writer that orders nothing at store: its chunks go up at
  // their second reuse, ordered where its requests reported importance.
  testing::RedisServer redis2;
  TempDir dc, dd;
  EngineOptions wo = Options(dc.path(), redis2.url(), RemoteAdmit::kReused);
  wo.system = System::kImpress;
  ASSERT_OK_AND_ASSIGN(auto w2, Engine::Open(*model_, wo));
  ASSERT_TRUE(w2->Serve(A()).ok());
  ASSERT_TRUE(w2->Serve(B(), FromP()).ok());
  ASSERT_TRUE(w2->Serve(B(), FromP()).ok());
  w2->DrainRemote();
  ASSERT_EQ(w2->RemoteStatistics().uploads, 4u);
  const store::LookupResult m = w2->TEST_store()->Lookup(A());
  const auto headers =
      ValueHeaders(redis2.port(), FingerprintOf(redis2), {m.prefix_hashes.begin(), m.prefix_hashes.begin() + 4});
  size_t ordered = 0;
  for (const auto& chunk : headers) {
    for (const auto& h : chunk) ordered += h.kind == store::RecordKind::kReorderedKeyValue;
  }
  std::printf("[ partial ] %zu of 32 chunk layers went up ordered\n", ordered);
  EXPECT_GT(ordered, 0u);
  // One layer in token order, as a writer whose probes fell back there sends it.
  {
    remote::RedisConn conn({"127.0.0.1", redis2.port()}, milliseconds(1000));
    std::vector<remote::Reply> r;
    remote::ErrorKind kind;
    const std::string key = remote::ChunkKey(FingerprintOf(redis2), m.prefix_hashes[1], 3);
    const std::vector<remote::Command> get = {{"GET", key}};
    ASSERT_TRUE(conn.Pipeline(get, &r, &kind).ok());
    std::string value = r[0].str;
    const std::vector<int32_t> a = A();
    const remote::ValueIdentity id{3, m.prefix_hashes[1], 64, 64, std::span(a).subspan(64, 64)};
    const store::RecordChecker check(headers[1][3].fingerprint, headers[1][3].row_bytes, store::KvDtype::kF16, 64);
    std::string why;
    const uint32_t pages = static_cast<uint32_t>(headers[1][3].page_checksums.size());
    ASSERT_EQ(TestSealer().OpenWhole(key, pages, &value, &why), remote::SealCheck::kOk) << why;
    ASSERT_OK(remote::TakeWholeValue(check, id, &value));
    store::RecordHeader h = headers[1][3];
    h.tokens = id.token_ids.empty() ? h.tokens : std::vector<int32_t>(id.token_ids.begin(), id.token_ids.end());
    std::string plain;
    remote::EncodeValue(h, std::span(value).subspan(store::kBlockSize, h.payload_bytes), {}, &plain);
    TestSealer().Seal(key, &plain);
    const std::vector<remote::Command> set = {{"SET", key, plain}};
    ASSERT_TRUE(conn.Pipeline(set, &r, &kind).ok());
  }
  const auto now = ValueHeaders(redis2.port(), FingerprintOf(redis2), {m.prefix_hashes.begin(), m.prefix_hashes.begin() + 4});
  ASSERT_EQ(now[1][3].kind, store::RecordKind::kKeyValue);
  ASSERT_OK_AND_ASSIGN(auto r2, Engine::Open(*model_, ImportantReader(dd.path(), redis2.url())));
  ASSERT_OK_AND_ASSIGN(ServeResult mixed, r2->Serve(B(), FromP()));
  EXPECT_EQ(mixed.stats.remote_important_chunks, 4u);
  EXPECT_EQ(mixed.stats.reused_tokens, kP);
  EXPECT_EQ(r2->RemoteStatistics().corrupt, 0u);
  EXPECT_EQ(MaxDiff(mixed.logits, AttendingTo(FarPositions(now, 4, 16), kP)), 0.0);
}

// Lookups run ahead of a request (a server's queue calls FetchAhead on
// arrival): the chunks are local before it starts, and fetched once even
// when the request starts while the fetch ahead runs.
TEST_F(RemoteEngineTest, ALookupRunAheadAdmitsThePrefixBeforeTheRequestStarts) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  TempDir da, db, dc;
  ASSERT_OK_AND_ASSIGN(auto writer, Engine::Open(*model_, Options(da.path(), redis.url())));
  const std::vector<float> want = WriteAndReuseLocally(writer.get());
  const uint64_t record = writer->TEST_store()->record_bytes(64);

  ASSERT_OK_AND_ASSIGN(auto reader, Engine::Open(*model_, Options(db.path(), redis.url())));
  reader->FetchAhead(B());
  reader->DrainRemote();  // the fetch ahead is done (B's own chunks go up later)
  RemoteStats rs = reader->RemoteStatistics();
  EXPECT_EQ(rs.ahead_fetches, 1u);
  EXPECT_EQ(rs.ahead_chunks, 4u);
  EXPECT_EQ(rs.hits, 4u);
  ASSERT_OK_AND_ASSIGN(ServeResult got, reader->Serve(B(), FromP()));
  EXPECT_EQ(got.stats.remote_chunks, 0u);  // local already
  EXPECT_EQ(got.stats.reused_tokens, kP);
  EXPECT_EQ(MaxDiff(got.logits, want), 0.0);
  EXPECT_EQ(reader->RemoteStatistics().bytes_down, 4 * 8 * SealedBytes(record));

  // The request right behind its fetch ahead: one of them fetches, once.
  ASSERT_OK_AND_ASSIGN(auto third, Engine::Open(*model_, Options(dc.path(), redis.url())));
  third->FetchAhead(B());
  ASSERT_OK_AND_ASSIGN(ServeResult both, third->Serve(B(), FromP()));
  third->DrainRemote();
  rs = third->RemoteStatistics();
  EXPECT_EQ(rs.hits, 4u);
  EXPECT_EQ(rs.bytes_down, 4 * 8 * SealedBytes(record));
  EXPECT_EQ(both.stats.reused_tokens, kP);
  EXPECT_EQ(MaxDiff(both.logits, want), 0.0);
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

// Issue 34 (8): an upload is counted when Redis accepted it ("OK" to every
// layer's SET), a refusal apart; Redis's own text is logged once.
TEST_F(RemoteEngineTest, AFullRedisRefusesWritesAndRequestsGoOn) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis({"--maxmemory", "1mb", "--maxmemory-policy", "noeviction"});
  TempDir da, db;
  ASSERT_OK_AND_ASSIGN(auto writer, Engine::Open(*model_, Options(da.path(), redis.url())));
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(writer->Serve(A()).ok());
  writer->DrainRemote();
  std::string log = ::testing::internal::GetCapturedStderr();
  const RemoteStats s = writer->RemoteStatistics();
  EXPECT_GE(s.errors[3], 1u);  // oom
  EXPECT_LT(s.uploads, 4u);
  EXPECT_GE(s.upload_refusals, 1u);
  EXPECT_EQ(s.uploads + s.upload_refusals, 4u);
  // What Redis holds: exactly the chunks counted as uploads have every layer.
  EXPECT_EQ(ChunksWithEveryLayer(redis, ""), s.uploads);
  EXPECT_EQ(Count(log, "OOM command not allowed"), 1u) << log;  // once, though every refused SET said so
  ASSERT_OK_AND_ASSIGN(ServeResult local, writer->Serve(B(), FromP()));
  EXPECT_EQ(local.stats.reused_tokens, kP);

  // Full before the first write (the issue's case): nothing accepted, nothing counted as written.
  redis.Cli("CONFIG SET maxmemory 1");
  ASSERT_OK_AND_ASSIGN(auto late, Engine::Open(*model_, Options(db.path(), redis.url())));
  const std::string before = redis.Cli("DBSIZE");
  ASSERT_TRUE(late->Serve(Prompt(kP, 2500, kQ)).ok());
  late->DrainRemote();
  const RemoteStats t = late->RemoteStatistics();
  EXPECT_EQ(redis.Cli("DBSIZE"), before);
  EXPECT_EQ(t.uploads, 0u);
  EXPECT_EQ(t.bytes_up, 0u);
  EXPECT_GE(t.upload_refusals, 1u);
}

// Issue 34 (8): redis://[USER:]PASSWORD@HOST, $TIERKV_REMOTE_PASSWORD; a
// missing or wrong password is a miss with Redis's reason logged once,
// never the password.
TEST_F(RemoteEngineTest, APasswordProtectedRedisServesTheRightLoginAndSaysWhyOthersMiss) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  ASSERT_EQ(redis.Cli("CONFIG SET requirepass s3cret"), "OK\n");
  ASSERT_EQ(redis.Cli("-a s3cret --no-auth-warning ACL SETUSER alice on '>a1ice-pw' '~*' '+@all'"), "OK\n");
  const std::string hp = "127.0.0.1:" + std::to_string(redis.port());
  ::unsetenv(remote::kRemotePasswordEnv);
  const std::vector<float> computed = Computed();
  std::string logs;
  TempDir da, db, dc, dd, de, df;

  // No password: every write refused (NOAUTH): refusals, not uploads.
  ASSERT_OK_AND_ASSIGN(auto anon, Engine::Open(*model_, Options(da.path(), "redis://" + hp)));
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(anon->Serve(A()).ok());
  anon->DrainRemote();
  std::string log = ::testing::internal::GetCapturedStderr();
  logs += log;
  RemoteStats s = anon->RemoteStatistics();
  EXPECT_EQ(s.uploads, 0u);
  EXPECT_EQ(s.upload_refusals, 4u) << log << " errors " << s.errors_total() << " dropped " << s.dropped_writes;
  EXPECT_GE(s.errors[5], 1u);  // auth
  EXPECT_EQ(Count(log, "NOAUTH Authentication required"), 1u) << log;  // once, not per command
  EXPECT_EQ(redis.Cli("-a s3cret --no-auth-warning DBSIZE"), "0\n");

  // The right password in the URL: written, every layer.
  ASSERT_OK_AND_ASSIGN(auto writer, Engine::Open(*model_, Options(db.path(), "redis://:s3cret@" + hp)));
  ::testing::internal::CaptureStderr();
  const std::vector<float> want = WriteAndReuseLocally(writer.get());
  logs += ::testing::internal::GetCapturedStderr();
  s = writer->RemoteStatistics();
  EXPECT_EQ(s.uploads, 4u);
  EXPECT_EQ(s.upload_refusals, 0u);
  EXPECT_EQ(s.errors_total(), 0u);
  EXPECT_EQ(redis.Cli("-a s3cret --no-auth-warning DBSIZE"), "32\n");

  // A wrong password: a miss, the same answer as computing, WRONGPASS logged.
  ASSERT_OK_AND_ASSIGN(auto wrong, Engine::Open(*model_, Options(dc.path(), "redis://:n0t-it@" + hp)));
  ::testing::internal::CaptureStderr();
  ASSERT_OK_AND_ASSIGN(ServeResult miss, wrong->Serve(B(), FromP()));
  log = ::testing::internal::GetCapturedStderr();
  logs += log;
  EXPECT_EQ(miss.stats.remote_chunks, 0u);
  EXPECT_EQ(MaxDiff(miss.logits, computed), 0.0);
  EXPECT_GE(wrong->RemoteStatistics().errors[5], 1u);  // auth
  EXPECT_NE(log.find("WRONGPASS"), std::string::npos) << log;
  EXPECT_NE(log.find("redis://***@" + hp), std::string::npos) << log;  // which tier, masked
  EXPECT_EQ(log.find("n0t-it"), std::string::npos) << log;

  // The password from $TIERKV_REMOTE_PASSWORD, the URL without one.
  ::setenv(remote::kRemotePasswordEnv, "s3cret", 1);
  ASSERT_OK_AND_ASSIGN(auto env, Engine::Open(*model_, Options(dd.path(), "redis://" + hp)));
  ::unsetenv(remote::kRemotePasswordEnv);
  ASSERT_OK_AND_ASSIGN(ServeResult got, env->Serve(B(), FromP()));
  EXPECT_EQ(got.stats.remote_chunks, 4u);
  EXPECT_EQ(MaxDiff(got.logits, want), 0.0);

  // An ACL user; and RemoteOptions::password for a URL naming the user alone.
  ASSERT_OK_AND_ASSIGN(auto alice, Engine::Open(*model_, Options(de.path(), "redis://alice:a1ice-pw@" + hp)));
  ASSERT_OK_AND_ASSIGN(got, alice->Serve(B(), FromP()));
  EXPECT_EQ(got.stats.remote_chunks, 4u);
  EngineOptions o = Options(df.path(), "redis://alice:@" + hp);
  o.remote.password = "a1ice-pw";
  ASSERT_OK_AND_ASSIGN(auto alice2, Engine::Open(*model_, o));
  ASSERT_OK_AND_ASSIGN(got, alice2->Serve(B(), FromP()));
  EXPECT_EQ(got.stats.remote_chunks, 4u);
  EXPECT_EQ(logs.find("s3cret"), std::string::npos) << logs;
}

// Issue 34 (8): the URL's database holds the keys; a database Redis
// refuses is a miss with Redis's reason logged.
TEST_F(RemoteEngineTest, TheUrlsDatabaseHoldsTheKeysAndARefusedOneIsAMissSayingWhy) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  TempDir da, db, dc, dd;
  ASSERT_OK_AND_ASSIGN(auto writer, Engine::Open(*model_, Options(da.path(), redis.url() + "/5")));
  const std::vector<float> want = WriteAndReuseLocally(writer.get());
  EXPECT_EQ(writer->RemoteStatistics().uploads, 4u);
  EXPECT_EQ(redis.Cli("-n 5 DBSIZE"), "32\n");
  EXPECT_EQ(redis.Cli("DBSIZE"), "0\n");
  EXPECT_EQ(ChunksWithEveryLayer(redis, "-n 5"), 4u);
  ASSERT_OK_AND_ASSIGN(auto five, Engine::Open(*model_, Options(db.path(), redis.url() + "/5")));
  ASSERT_OK_AND_ASSIGN(ServeResult got, five->Serve(B(), FromP()));
  EXPECT_EQ(got.stats.remote_chunks, 4u);
  EXPECT_EQ(MaxDiff(got.logits, want), 0.0);
  ASSERT_OK_AND_ASSIGN(auto zero, Engine::Open(*model_, Options(dc.path(), redis.url())));
  ASSERT_OK_AND_ASSIGN(got, zero->Serve(B(), FromP()));
  EXPECT_EQ(got.stats.remote_chunks, 0u);

  // Database 99 of a server with 16: SELECT refused, Redis's words in the log.
  ASSERT_OK_AND_ASSIGN(auto bad, Engine::Open(*model_, Options(dd.path(), redis.url() + "/99")));
  ::testing::internal::CaptureStderr();
  ASSERT_OK_AND_ASSIGN(got, bad->Serve(B(), FromP()));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(got.stats.remote_chunks, 0u);
  EXPECT_EQ(got.stats.reused_tokens, 0u);
  EXPECT_GE(bad->RemoteStatistics().errors[4], 1u);  // reply
  EXPECT_NE(log.find("SELECT 99"), std::string::npos) << log;
  EXPECT_NE(log.find("DB index is out of range"), std::string::npos) << log;
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

// The remote tier below the disk tier: chunk records in Redis, shared by
// every tierkv process of one model (docs/remote.md; keys and values in
// docs/format.md).
//
// Values are the store's own K/V records (header, checksums, identity), so
// a value read from Redis is verified exactly as one read from disk: a
// value that fails is a miss and a counter, never a served row. Fetched
// chunks are admitted into the local disk tier (ChunkStore::Put), and the
// request then reads them as any stored chunk, through the pools.
//
// Threads: `tierkv-remote-up` writes behind: it takes chunks from a bounded
// queue (full: the write is dropped and counted), reads their records from
// the local store, and SETs them. Fetches run on the requesting thread under
// fetch_mu_, with their own connections. A failure of any kind is a miss;
// no call here fails a request.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "remote/router.h"
#include "store/chunk_store.h"
#include "tierkv/mutex.h"
#include "tierkv/remote.h"

namespace tierkv::remote {

struct RemoteGeometry {
  uint64_t fingerprint = 0;  // the store's: the model namespace of keys and records
  uint16_t layers = 1;
  uint32_t row_bytes = 0;
  uint32_t chunk_tokens = 64;
  store::KvDtype dtype = store::KvDtype::kF16;
};

// The key of one chunk layer: tierkv:{FFFFFFFFFFFFFFFF.PPPPPPPPPPPPPPPP}:L
// (fingerprint and prefix hash in hex; the braces are the cluster hash tag,
// so every layer of a chunk lives on one node).
std::string ChunkKey(uint64_t fingerprint, uint64_t prefix_hash, uint16_t layer);

struct FillResult {
  size_t chunks = 0;  // chunks fetched and admitted into the local store
  uint64_t bytes = 0;
  double ms = 0;
};

class RemoteTier {
 public:
  // InvalidArgument for a bad URL or option; never for an unreachable
  // server (that is a miss per request). `store` must outlive the tier.
  static Result<std::unique_ptr<RemoteTier>> Open(const RemoteOptions& options, RemoteGeometry geometry,
                                                  store::ChunkStore* store);
  ~RemoteTier();  // stops the upload thread (what is queued is dropped)
  RemoteTier(const RemoteTier&) = delete;
  RemoteTier& operator=(const RemoteTier&) = delete;

  // Extends the local match `m` of `tokens` with whole chunks found
  // remotely, up to `limit` tokens: looked up (pipelined EXISTS), fetched
  // (pipelined GETs), verified, and admitted with one Put. Stops at the
  // first chunk that is absent or fails. Only from a chunk boundary.
  // `admitted`, if set, is called once the run is in the store with each
  // chunk layer's payload (K then V, token-major), for the caller's pools.
  using AdmittedFn = std::function<void(uint64_t prefix_hash, uint16_t layer, std::span<const char> payload)>;
  FillResult Fill(std::span<const int32_t> tokens, const store::LookupResult& m, size_t limit,
                  const AdmittedFn& admitted = {});

  // A request reused `reused` tokens of the local match `m` (admit
  // kReused: the chunks reaching their second reuse go up).
  void OnReused(std::span<const int32_t> tokens, const store::LookupResult& m, size_t reused);
  // A request stored its prompt (admit kAlways: its whole chunks go up).
  void OnStored(std::span<const int32_t> tokens);

  // Waits until the upload queue is empty and the thread idle (tests,
  // benchmarks before a second process reads).
  void Drain();
  RemoteStats stats() const;
  const RemoteOptions& options() const { return opts_; }

 private:
  struct Upload {
    std::shared_ptr<const std::vector<int32_t>> tokens;
    std::vector<uint32_t> chunks;  // chunk indices of `tokens` to write
  };
  RemoteTier(const RemoteOptions& o, RemoteGeometry g, RedisUrl url, store::ChunkStore* store);
  void Enqueue(std::span<const int32_t> tokens, std::vector<uint32_t> chunks,
               const std::vector<uint64_t>& hashes) TIERKV_EXCLUDES(mu_);
  void EnqueueLocked(std::span<const int32_t> tokens, std::vector<uint32_t> chunks,
                     const std::vector<uint64_t>& hashes) TIERKV_REQUIRES(mu_);
  void UploadLoop();
  void WriteChunks(const Upload& u);
  // The verified records of `hashes`' chunks (in order) that are present,
  // stopping at the first absent or bad one: payloads per chunk and layer.
  std::vector<std::vector<std::string>> FetchRun(std::span<const int32_t> tokens, size_t start,
                                                 std::span<const uint64_t> hashes, uint64_t* bytes);
  bool CheckValue(const std::string& value, std::span<const int32_t> chunk_tokens, uint32_t first_token,
                  uint64_t prefix_hash, uint16_t layer);
  // Router::Run, its failures and redirects counted.
  void RunCounted(Router* router, std::span<const Command> cmds, std::vector<Reply>* replies,
                  std::vector<ErrorKind>* errors) TIERKV_EXCLUDES(mu_);
  void CountError(ErrorKind k) TIERKV_EXCLUDES(mu_);
  void CountErrors(const std::vector<ErrorKind>& errors) TIERKV_EXCLUDES(mu_);

  const RemoteOptions opts_;
  const RemoteGeometry geo_;
  const RedisUrl url_;
  store::ChunkStore* const store_;

  Mutex fetch_mu_;  // the request path's connections
  Router fetch_router_ TIERKV_GUARDED_BY(fetch_mu_);

  mutable Mutex mu_;  // the queue, admission state and counters
  CondVar cv_;
  std::deque<Upload> queue_ TIERKV_GUARDED_BY(mu_);
  size_t queued_chunks_ TIERKV_GUARDED_BY(mu_) = 0;
  bool busy_ TIERKV_GUARDED_BY(mu_) = false;  // the thread is writing an item
  bool stop_ TIERKV_GUARDED_BY(mu_) = false;
  std::unordered_map<uint64_t, uint32_t> reuses_ TIERKV_GUARDED_BY(mu_);  // prefix hash -> local reuses
  std::unordered_set<uint64_t> sent_ TIERKV_GUARDED_BY(mu_);  // prefix hashes queued or written
  RemoteStats stats_ TIERKV_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point last_log_ TIERKV_GUARDED_BY(mu_){};

  Router up_router_;  // the upload thread's own
  std::thread thread_;
};

}  // namespace tierkv::remote

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
// the local store, and SETs them. `tierkv-remote-ah` runs lookups ahead
// of requests (FetchAhead: a request waiting in a server's queue), from a
// bounded queue of prompts. Fetches run on the requesting thread or the
// ahead thread under fetch_mu_, with their own connections; a fetch takes
// the local match under that lock, so a request whose prompt is being
// fetched ahead waits for it and then fetches only what is still missing.
// A failure of any kind is a miss; no call here fails a request.
#pragma once

#include <atomic>
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
#include "remote/seal.h"
#include "remote/value.h"
#include "store/chunk_store.h"
#include "store/record_check.h"
#include "tierkv/mutex.h"
#include "tierkv/remote.h"

namespace tierkv::remote {

// Redis caps what clients may keep unread; a run's GETs (whole values or
// important ranges) are sent in pipelines of at most this many chunks.
constexpr size_t kChunksPerPipeline = 16;

struct RemoteGeometry {
  uint64_t fingerprint = 0;  // the store's: the model namespace of keys and records
  uint16_t layers = 1;
  uint32_t row_bytes = 0;
  uint32_t chunk_tokens = 64;
  store::KvDtype dtype = store::KvDtype::kF16;
  // Rows the readers' selection unit takes together (the rows of a page, a
  // block; 1: single rows): values go up ordered by whole units.
  uint32_t unit_rows = 1;
};

// The key of one chunk layer: tierkv:{FFFFFFFFFFFFFFFF.PPPPPPPPPPPPPPPP}:L
// (fingerprint and prefix hash in hex; the braces are the cluster hash tag,
// so every layer of a chunk lives on one node).
std::string ChunkKey(uint64_t fingerprint, uint64_t prefix_hash, uint16_t layer);

// The important rows of chunks that only the remote tier holds
// (RemoteRead::kImportant), per layer in chunk order: each row's absolute
// position, its K and its V (row_bytes each, in that order).
struct FarRows {
  size_t start = 0, end = 0;  // the tokens covered: whole chunks; end == start: none
  size_t chunks = 0;
  std::vector<std::vector<int32_t>> positions;  // per layer
  std::vector<std::string> k, v;                // per layer
  uint64_t bytes = 0;       // fetched
  uint64_t value_bytes = 0; // the whole values' sizes
  double ms = 0;
};

struct FillResult {
  // The local match of the prompt after the fill (taken under fetch_mu_,
  // again after a Put): what the caller reuses, without a lookup of its own.
  store::LookupResult match;
  size_t chunks = 0;  // chunks fetched and admitted into the local store
  uint64_t bytes = 0;
  double ms = 0;
};

class RemoteTier {
 public:
  // InvalidArgument for a bad URL or option, or without a key (Sealer::Load);
  // never for an unreachable server (that is a miss per request). `store`
  // must outlive the tier.
  static Result<std::unique_ptr<RemoteTier>> Open(const RemoteOptions& options, RemoteGeometry geometry,
                                                  store::ChunkStore* store);
  ~RemoteTier();  // stops the upload thread (what is queued is dropped)
  RemoteTier(const RemoteTier&) = delete;
  RemoteTier& operator=(const RemoteTier&) = delete;

  // Extends the local match of `tokens` (looked up here, under fetch_mu_)
  // with whole chunks found remotely, up to `limit` tokens: looked up
  // (pipelined EXISTS), fetched (pipelined GETs), verified, and admitted with
  // one Put. Stops at the first chunk that is absent or fails. Starts at
  // the local match's last whole chunk. `admitted`, if set, is called once the run is in the
  // store with each chunk layer's payload (K then V, token-major), for the
  // caller's pools.
  using AdmittedFn = std::function<void(uint64_t prefix_hash, uint16_t layer, std::span<const char> payload)>;
  // `ns`: the prompt's namespace (store::KvInput::cache_namespace), the seed
  // of its chunks' hash chain and so of their remote keys.
  FillResult Fill(std::span<const int32_t> tokens, size_t limit, const AdmittedFn& admitted = {},
                  uint64_t ns = 0) TIERKV_EXCLUDES(fetch_mu_);

  // Fill on the `tierkv-remote-ah` thread, returning at once: for a
  // request that will start later (a server's queue). At most
  // RemoteOptions::ahead_prompts wait; more are dropped (counted).
  // `admitted` must stay callable until the tier is destroyed. The flag
  // returned turns true once the fill is over (done or failed) or was
  // dropped (also at once, and when the tier stops before it ran).
  std::shared_ptr<const std::atomic<bool>> FetchAhead(std::span<const int32_t> tokens, size_t limit,
                                                      AdmittedFn admitted, uint64_t ns = 0) TIERKV_EXCLUDES(mu_);

  // Past `start` (a chunk boundary whose chain hash is `parent_hash`: the
  // namespace at 0), up
  // to `limit` tokens: of each chunk whose value is ordered, the first
  // keep[layer] rows of each layer, fetched by GETRANGE (the header block,
  // then the pages holding those rows of K and of V) and verified page by
  // page. Stops at the first chunk that is absent, unordered or fails;
  // admits nothing locally.
  FarRows FetchImportant(std::span<const int32_t> tokens, size_t start, uint64_t parent_hash, size_t limit,
                         std::span<const uint32_t> keep);

  // A request reused `reused` tokens of the local match `m` (admit
  // kReused: the chunks reaching their second reuse go up).
  void OnReused(std::span<const int32_t> tokens, const store::LookupResult& m, size_t reused,
                uint64_t ns = 0);
  // A request stored its prompt (admit kAlways: its whole chunks go up).
  void OnStored(std::span<const int32_t> tokens, uint64_t ns = 0);

  // Waits until the upload and ahead queues are empty and their threads
  // idle (tests, benchmarks before a second process reads).
  void Drain();
  RemoteStats stats() const;
  const RemoteOptions& options() const { return opts_; }

 private:
  struct Upload {
    std::shared_ptr<const std::vector<int32_t>> tokens;
    std::vector<uint32_t> chunks;  // chunk indices of `tokens` to write
    uint64_t ns = 0;               // the prompt's namespace
  };
  RemoteTier(const RemoteOptions& o, RemoteGeometry g, RedisUrl url, Sealer sealer, store::ChunkStore* store);
  // Payload pages of one value (every value is a whole chunk layer).
  uint32_t ValuePages() const;
  // A fetched whole value of `id`: its seal opened and the record checked
  // (TakeWholeValue); a failure counted (unsealed: a miss; forged or
  // damaged: corrupt, and rejected when the seal failed).
  bool TakeWhole(const ValueIdentity& id, std::string* value);
  void Enqueue(std::span<const int32_t> tokens, std::vector<uint32_t> chunks,
               const std::vector<uint64_t>& hashes, uint64_t ns) TIERKV_EXCLUDES(mu_);
  void EnqueueLocked(std::span<const int32_t> tokens, std::vector<uint32_t> chunks,
                     const std::vector<uint64_t>& hashes, uint64_t ns) TIERKV_REQUIRES(mu_);
  void UploadLoop();
  void AheadLoop();
  struct Ahead {
    std::vector<int32_t> tokens;
    size_t limit = 0;
    AdmittedFn admitted;
    uint64_t ns = 0;
    std::shared_ptr<std::atomic<bool>> done;  // set when the fill is over
  };
  void WriteChunks(const Upload& u);
  // The verified records of `hashes`' chunks (in order) that are present,
  // stopping at the first absent or bad one: payloads per chunk and layer.
  std::vector<std::vector<std::string>> FetchRun(std::span<const int32_t> tokens, size_t start,
                                                 std::span<const uint64_t> hashes, uint64_t* bytes) TIERKV_REQUIRES(fetch_mu_);
  void CountCorrupt(uint64_t prefix_hash, uint16_t layer, const Status& why) TIERKV_EXCLUDES(mu_);
  // A value whose seal failed (`s`: kUnsealed or kForged), with why.
  void CountSeal(uint64_t prefix_hash, uint16_t layer, SealCheck s, const std::string& why) TIERKV_EXCLUDES(mu_);
  // One chunk layer's ranges (`replies`) of an ordered value: checked page by
  // page, its first `keep` rows into chunk->*[id.layer]. kTokenOrder: a
  // valid value in token order (to fetch whole); kFail: absent, an error, or
  // damaged (counted).
  enum class Take { kOk, kTokenOrder, kFail };
  Take TakeImportant(const ValueIdentity& id, std::span<const ByteRange> ranges, std::span<const Reply> replies,
                     std::span<const ErrorKind> errors, uint32_t keep, FarRows* chunk);
  // The layers `whole` lists ((index into *staged, layer)) fetched whole
  // and verified, every row into the staged chunk; the chunks before the
  // first that failed (staged->size() when none did).
  size_t FetchWholeLayers(std::span<const int32_t> tokens, size_t start, std::span<const uint64_t> hashes,
                          size_t first, const std::vector<std::pair<size_t, uint16_t>>& whole,
                          std::vector<FarRows>* staged) TIERKV_REQUIRES(fetch_mu_);
  // FetchImportant's two rounds for chunks [first, last) of `hashes`: the
  // ordered headers, then the important pages; appends to *out and returns
  // false at the first chunk that is absent, unordered or fails.
  bool FetchImportantGroup(std::span<const int32_t> tokens, size_t start, std::span<const uint64_t> hashes,
                           size_t first, size_t last, std::span<const uint32_t> keep, FarRows* out)
      TIERKV_REQUIRES(fetch_mu_);
  // Router::Run, its failures and redirects counted.
  void RunCounted(Router* router, std::span<const Command> cmds, std::vector<Reply>* replies,
                  std::vector<ErrorKind>* errors) TIERKV_EXCLUDES(mu_);
  // Counts one error of kind `k`; logs `why` (Redis's own text, or the
  // transport's) when this text was not logged in the last 10 minutes: one
  // line per distinct error, never one per request. `why` never holds the
  // password (RedisConn does not quote it; the URL is printed masked).
  void CountError(ErrorKind k, const std::string& why, bool log = true) TIERKV_EXCLUDES(mu_);
  void CountErrorReply(const Reply& r) TIERKV_EXCLUDES(mu_);  // an error reply, its text quoted
  // A batch's failures (Router::Run's: one per failed pipeline).
  void CountErrors(const std::vector<Failure>& failures) TIERKV_EXCLUDES(mu_);

  const RemoteOptions opts_;
  const RemoteGeometry geo_;
  const RedisUrl url_;
  store::ChunkStore* const store_;
  const store::RecordChecker checker_;
  const Sealer sealer_;

  Mutex fetch_mu_;  // the request path's connections
  Router fetch_router_ TIERKV_GUARDED_BY(fetch_mu_);

  mutable Mutex mu_;  // the queue, admission state and counters
  CondVar cv_;
  std::deque<Upload> queue_ TIERKV_GUARDED_BY(mu_);
  size_t queued_chunks_ TIERKV_GUARDED_BY(mu_) = 0;
  bool busy_ TIERKV_GUARDED_BY(mu_) = false;  // the thread is writing an item
  std::deque<Ahead> ahead_ TIERKV_GUARDED_BY(mu_);
  bool ahead_busy_ TIERKV_GUARDED_BY(mu_) = false;  // the ahead thread is fetching
  bool stop_ TIERKV_GUARDED_BY(mu_) = false;
  std::unordered_map<uint64_t, uint32_t> reuses_ TIERKV_GUARDED_BY(mu_);  // prefix hash -> local reuses
  std::unordered_set<uint64_t> sent_ TIERKV_GUARDED_BY(mu_);  // prefix hashes queued or written
  RemoteStats stats_ TIERKV_GUARDED_BY(mu_);
  struct Logged {
    std::chrono::steady_clock::time_point at;  // last logged
    uint64_t since = 0;                        // times seen since, not logged
  };
  std::unordered_map<std::string, Logged> logged_ TIERKV_GUARDED_BY(mu_);  // by message

  Router up_router_;  // the upload thread's own
  std::thread thread_;
  std::thread ahead_thread_;
};

}  // namespace tierkv::remote

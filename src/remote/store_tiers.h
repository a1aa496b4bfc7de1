// The tiers below the pools behind one lookup and one put: the local disk
// tier (store::ChunkStore) and, with --remote, the Redis tier under it
// (RemoteTier). The engine asks `Lookup` for a prompt's reusable prefix and
// hands its prompt to `Put`; what falls through to Redis (whole chunks
// fetched and admitted, or the important rows of chunks read in part) and
// what goes up to it (write-behind after a put or a reuse) happens here, as
// LMCache's storage manager hides its backends.
//
// Thread safety: every call may come from any thread (the store and the
// remote tier lock what they share); the tiers own the remote tier and
// borrow the store, which must outlive them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "remote/remote_tier.h"
#include "store/chunk_store.h"
#include "tierkv/remote.h"
#include "tierkv/status.h"

namespace tierkv::remote {

// The tokens of local match `m` a request reuses: at most `cap`, rounded
// down to whole chunks where `whole_chunks` (selective readers).
size_t ReusableTokens(const store::LookupResult& m, size_t cap, bool whole_chunks, uint32_t chunk_tokens);

// What a request asks of the tiers.
struct TierQuery {
  uint64_t ns = 0;               // the prompt's namespace (store::KvInput::cache_namespace)
  size_t cap = 0;                // reuse at most this many tokens
  bool whole_chunks = false;     // reuse whole chunks only (selective readers)
  bool fall_through = true;      // ask the remote tier (a retry after damage reads the local store only)
  std::span<const uint32_t> keep;  // rows per layer of a remote chunk read in part; empty: whole chunks
};

struct TierMatch {
  store::LookupResult local;  // the local match, after any remote chunks were admitted
  size_t reusable = 0;        // its tokens the request reuses (ReusableTokens)
  FarRows far;                // remote chunks past `reusable` read in part (query.keep), else none
  size_t remote_chunks = 0;   // chunks fetched whole and admitted locally
  uint64_t remote_bytes = 0;  // bytes read from the remote tier
  double remote_ms = 0;
};

class StoreTiers {
 public:
  // Without a remote URL (options.url empty) only the local tier. Errors:
  // RemoteTier::Open's (a bad URL or option). `admitted` is called with
  // each chunk layer fetched whole once it is in the store (the caller's
  // pools); it must stay callable while the tiers live.
  // `geometry` describes the store's records (its chunk_tokens is the
  // store's), for the remote tier's keys and values and for ReusableTokens.
  static Result<std::unique_ptr<StoreTiers>> Open(store::ChunkStore* store, const RemoteOptions& options,
                                                  RemoteGeometry geometry, RemoteTier::AdmittedFn admitted);
  ~StoreTiers();  // stops the remote tier's threads before the store may go

  // The prompt's stored prefix. Locally first; on a first attempt with a
  // remote tier: with `keep`, the important rows of the remote chunks past
  // the reusable local prefix (if they are ordered there), else whole
  // chunks fetched, verified and admitted into the store. A reuse of
  // `reusable` > 0 tokens is reported to the remote tier's admission.
  TierMatch Lookup(std::span<const int32_t> tokens, const TierQuery& q);
  // Stores the prompt locally (store::ChunkStore::Put); after a success,
  // with a remote tier admitting `always`, its whole chunks are queued for
  // Redis (write-behind; with `reused`, Lookup sends them up instead). The
  // queueing runs on the caller's thread (hashing the chunks, a lock:
  // microseconds), so a caller timing Put times it too.
  Result<store::PutResult> Put(std::span<const int32_t> tokens, const store::KvInput& in);
  // Whole-chunk fetches for a prompt that will start later (a server's
  // queue), on the remote tier's ahead thread; null without one, else
  // RemoteTier::FetchAhead's flag (true at once when the remote tier could
  // add nothing past the local match).
  std::shared_ptr<const std::atomic<bool>> FetchAhead(std::span<const int32_t> tokens, size_t limit, uint64_t ns);

  bool has_remote() const { return remote_ != nullptr; }
  // Waits for the remote tier's queues (tests, benchmarks); at once without one.
  void Drain();
  RemoteStats remote_stats() const;

 private:
  StoreTiers(store::ChunkStore* store, uint32_t chunk_tokens, std::unique_ptr<RemoteTier> remote,
             RemoteTier::AdmittedFn admitted);

  store::ChunkStore* const store_;
  const uint32_t chunk_tokens_;
  std::unique_ptr<RemoteTier> remote_;  // null without --remote
  const RemoteTier::AdmittedFn admitted_;
};

}  // namespace tierkv::remote

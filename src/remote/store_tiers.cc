#include "remote/store_tiers.h"

#include <algorithm>
#include <utility>

namespace tierkv::remote {

size_t ReusableTokens(const store::LookupResult& m, size_t cap, bool whole_chunks, uint32_t chunk_tokens) {
  size_t R = std::min(m.matched_tokens, cap);
  // Selective loads work on whole chunks (full ones: only a path's last
  // chunk can be short, and it is then past R; the engine reads it whole).
  if (whole_chunks) R = R / chunk_tokens * chunk_tokens;
  return R;
}

Result<std::unique_ptr<StoreTiers>> StoreTiers::Open(store::ChunkStore* store, const RemoteOptions& options,
                                                     RemoteGeometry geometry, RemoteTier::AdmittedFn admitted) {
  std::unique_ptr<RemoteTier> remote;
  if (!options.url.empty()) {
    ASSIGN_OR_RETURN(remote, RemoteTier::Open(options, geometry, store));
  }
  return std::unique_ptr<StoreTiers>(
      new StoreTiers(store, geometry.chunk_tokens, std::move(remote), std::move(admitted)));
}

StoreTiers::StoreTiers(store::ChunkStore* store, uint32_t chunk_tokens, std::unique_ptr<RemoteTier> remote,
                       RemoteTier::AdmittedFn admitted)
    : store_(store), chunk_tokens_(chunk_tokens), remote_(std::move(remote)), admitted_(std::move(admitted)) {}

StoreTiers::~StoreTiers() = default;

TierMatch StoreTiers::Lookup(std::span<const int32_t> tokens, const TierQuery& q) {
  TierMatch out;
  if (!remote_ || !q.fall_through) {
    out.local = store_->Lookup(tokens, q.ns);
  } else {
    bool read_in_part = false;
    if (!q.keep.empty()) {
      out.local = store_->Lookup(tokens, q.ns);
      // From the reusable prefix's end: a short local last chunk (a shorter
      // prompt stored before) does not hide the remote tier's whole one.
      const size_t R = ReusableTokens(out.local, q.cap, q.whole_chunks, chunk_tokens_);
      out.far = remote_->FetchImportant(tokens, R, R == 0 ? q.ns : out.local.prefix_hashes[R / chunk_tokens_ - 1],
                                        q.cap, q.keep);
      read_in_part = out.far.chunks > 0;
      if (read_in_part) {
        out.remote_bytes = out.far.bytes;
        out.remote_ms = out.far.ms;
      }
    }
    if (!read_in_part) {
      // Fill looks the prompt up itself (after a fetch ahead for it, after
      // its own Put): its match is the one to reuse.
      FillResult f = remote_->Fill(tokens, q.cap, admitted_, q.ns);
      out.local = std::move(f.match);
      out.remote_chunks = f.chunks;
      out.remote_bytes = f.bytes;
      out.remote_ms = f.ms;
    }
  }
  out.reusable = ReusableTokens(out.local, q.cap, q.whole_chunks, chunk_tokens_);
  // Fetched chunks are up there already; local ones reaching their second
  // reuse go up (admission `reused`).
  if (remote_ && out.reusable > 0) remote_->OnReused(tokens, out.local, out.reusable, q.ns);
  return out;
}

Result<store::PutResult> StoreTiers::Put(std::span<const int32_t> tokens, const store::KvInput& in) {
  auto put = store_->Put(tokens, in);
  if (put.ok() && remote_) remote_->OnStored(tokens, in.cache_namespace);
  return put;
}

std::shared_ptr<const std::atomic<bool>> StoreTiers::FetchAhead(std::span<const int32_t> tokens, size_t limit,
                                                                uint64_t ns) {
  if (!remote_) return nullptr;
  // Nothing the remote tier could add (no whole chunk past the local
  // match's last whole one before `limit`): no fetch, and over already, so
  // the request neither queues behind others' fetches nor asks Redis itself
  // (a slow Redis delays only the prompts that ask it).
  const size_t start = store_->Lookup(tokens, ns).matched_tokens / chunk_tokens_ * chunk_tokens_;
  if (limit > tokens.size() || limit < start + chunk_tokens_) return std::make_shared<const std::atomic<bool>>(true);
  return remote_->FetchAhead(tokens, limit, admitted_, ns);
}

void StoreTiers::Drain() {
  if (remote_) remote_->Drain();
}

RemoteStats StoreTiers::remote_stats() const { return remote_ ? remote_->stats() : RemoteStats{}; }

}  // namespace tierkv::remote

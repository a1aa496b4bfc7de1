// What a scheduler asks of the engine before a request starts: where the
// prompt's stored prefix is (CaR's classes), loading it into the pools
// ahead of the request (the timed prefetcher's work), and the car policy's
// score events from the scheduler's window.
#include <algorithm>

#include "engine/engine_impl.h"
#include "engine/far_rows.h"
#include "engine/pool_entries.h"

namespace tierkv::engine {

std::string_view PrefixPlaceName(PrefixPlace p) {
  switch (p) {
    case PrefixPlace::kPools: return "pools";
    case PrefixPlace::kNone: return "none";
    case PrefixPlace::kDisk: return "disk";
  }
  return "?";
}

PrefixLocation Engine::Locate(std::span<const int32_t> tokens, uint64_t cache_namespace) {
  Impl& im = *impl_;
  PrefixLocation out;
  if (!im.row.reuses() || tokens.size() < 2) return out;
  const store::LookupResult m = im.store->Lookup(tokens, cache_namespace);
  const size_t R = im.Reusable(m, tokens.size() - 1);
  const size_t tail = std::max(R, im.TailEnd(m, tokens.size() - 1, {})) - R;  // rows read whole past R
  out.reusable_tokens = R + tail;
  // Less than a chunk (a shared BOS, a few tokens of a system prompt): next
  // to no transfer, as good as nothing stored.
  if (R < im.opts.chunk_tokens) return out;
  out.score_keys = im.ScoreKeys(m, R);
  const StartReads sr = im.source->QueryFreeReads();
  const size_t ct = im.opts.chunk_tokens, L = static_cast<size_t>(im.c.n_layers);
  std::vector<uint64_t> keys;
  for (size_t i = 0; i * ct < R; ++i) {
    for (size_t l = 0; l < L; ++l) keys.push_back(PoolKey(sr.entry, m.prefix_hashes[i], static_cast<int>(l)));
  }
  const std::vector<cache::Tier> tiers = im.pools->TiersOf(keys);
  for (size_t k = 0; k < keys.size(); ++k) {
    if (tiers[k] != cache::Tier::kDisk) continue;
    const size_t i = k / L;  // the chunk
    out.disk_bytes += std::min(ct, R - i * ct) * sr.bytes_per_row;
  }
  if (tail > 0) {
    // The tail's rows, read whole through the chunk's row entries.
    std::vector<uint64_t> tk;
    for (size_t l = 0; l < L; ++l) tk.push_back(PoolKey(EntryKind::kRows, m.prefix_hashes[R / ct], static_cast<int>(l)));
    const std::vector<cache::Tier> tt = im.pools->TiersOf(tk);
    for (cache::Tier t : tt) out.disk_bytes += t == cache::Tier::kDisk ? 2 * tail * im.row_bytes : 0;
  }
  out.place = out.disk_bytes > 0 ? PrefixPlace::kDisk : PrefixPlace::kPools;
  return out;
}

PrefixPlace Engine::PlaceServed(const RequestStats& stats) const {
  if (stats.reused_tokens < impl_->opts.chunk_tokens) return PrefixPlace::kNone;
  return stats.disk_reads > 0 ? PrefixPlace::kDisk : PrefixPlace::kPools;
}

Result<PrefetchResult> Engine::Prefetch(std::span<const int32_t> tokens, uint64_t cache_namespace) {
  Impl& im = *impl_;
  const auto t0 = Clock::now();
  PrefetchResult out;
  if (!im.row.reuses() || tokens.size() < 2) return out;
  const store::LookupResult m = im.store->Lookup(tokens, cache_namespace);
  const size_t R = im.Reusable(m, tokens.size() - 1);
  const size_t tail_end = im.TailEnd(m, tokens.size() - 1, {});
  out.reusable_tokens = std::max(R, tail_end);
  const StartReads sr = im.source->QueryFreeReads();
  IoCounts io;
  for (int l = 0; R > 0 && l < im.c.n_layers; ++l) {
    Fetch f;  // the bytes are dropped: what counts is that the pools now hold them
    Status s = sr.read(*im.reader, m, R, l, f, &io);
    if (!s.ok()) return s.WithContext("prefetch layer " + std::to_string(l));
  }
  if (tail_end > R) {
    remote::FarRows tail;  // the rows are dropped: the pools now hold them
    RETURN_IF_ERROR(ReadTailRows(*im.reader, m, R, tail_end, im.c.n_layers, &tail, &io).WithContext("prefetch tail"));
  }
  out.disk_bytes_read = io.bytes;
  out.ms = MsSince(t0);
  return out;
}

void Engine::OnSchedulerEvent(const PrefixLocation& where, SchedulerEvent event) {
  Impl& im = *impl_;
  if (!im.pools || where.score_keys.empty()) return;
  cache::RequestEvent e = cache::RequestEvent::kEnterWindow;
  switch (event) {
    case SchedulerEvent::kEnterWindow: e = cache::RequestEvent::kEnterWindow; break;
    case SchedulerEvent::kStart: e = cache::RequestEvent::kStart; break;
    case SchedulerEvent::kFinish: e = cache::RequestEvent::kFinish; break;
    case SchedulerEvent::kLeaveWindow: e = cache::RequestEvent::kLeaveWindow; break;
  }
  im.pools->OnRequestEvent(where.score_keys, e);
}

}  // namespace tierkv::engine

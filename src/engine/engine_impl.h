// The engine's parts (its Impl), shared by the files that implement Engine:
// engine.cc (opening, requests) and prefix_place.cc (what a scheduler asks
// before a request: where its prefix is, prefetching it).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "cache/tiered_cache.h"
#include "engine/car_profile.h"
#include "engine/layer_source.h"
#include "engine/load_queue.h"
#include "engine/periodic_task.h"
#include "engine/pooled_reader.h"
#include "engine/probe_profile.h"
#include "engine/prompt_writer.h"
#include "engine/request.h"
#include "engine/system_table.h"
#include "remote/store_tiers.h"
#include "select/identify.h"
#include "store/chunk_store.h"
#include "tierkv/engine.h"

namespace tierkv::engine {

struct Engine::Impl {
  Impl(const Model& m, EngineOptions o)
      : model(m), opts(std::move(o)), row(RowOf(opts.system)), c(m.config()),
        row_bytes(static_cast<uint32_t>(c.kv_dim() * 2)),
        probe_bytes(static_cast<uint32_t>(select::ProbeHeads(c.n_kv_heads) * c.head_dim() * 2)) {}

  Status OpenStore();
  void StartParts();
  // One attempt at a request, reusing fewer than `cap` prefix rows; on a
  // stored chunk that failed, *load_error says why and *reused how many rows
  // the attempt tried to reuse.
  Result<ServeResult> Attempt(std::span<const int32_t> tokens, const ServeOptions& so,
                              Clock::time_point t0, int attempt, size_t cap, size_t* reused,
                              Status* load_error);
  // The rows of the stored prefix this request reuses (below `cap`).
  size_t Reusable(const store::LookupResult& m, size_t cap) const;
  // Where a selective request's rows read whole past its whole chunks end
  // (0: none; without far rows only).
  size_t TailEnd(const store::LookupResult& m, size_t cap, const remote::FarRows& far) const;
  // A selective request's rows of `m` from rq.R to `end` (a partial chunk),
  // read whole into rq.tail; on a failed read none (they are computed).
  void ReadTail(const store::LookupResult& m, size_t end, Request& rq);
  // The stored prefix of `tokens` (StoreTiers::Lookup: the remote tier
  // only on the first attempt; a retry after damage reuses less, never
  // fetches again), its remote counters into *st.
  remote::TierMatch LookupPrefix(std::span<const int32_t> tokens, uint64_t ns, size_t cap, bool first_attempt,
                                 const std::vector<uint32_t>& keep, RequestStats* st);
  // Rows per layer of a remote chunk a request at `retention` (per layer:
  // `layer_retention`, when set) reads in part; empty when it reads whole
  // chunks (no remote tier, RemoteRead::kWhole, a system reading every row,
  // retention 1).
  std::vector<uint32_t> ImportantKeep(double retention, const std::vector<double>& layer_retention) const;
  // Whether a request at `retention` reads remote chunks in part (thread-safe: options only).
  bool ReadsImportant(double retention) const;
  // Admits a chunk fetched whole from the remote tier into the pools.
  remote::RemoteTier::AdmittedFn AdmitFetched();
  std::vector<uint64_t> ScoreKeys(const store::LookupResult& m, size_t R) const;
  PrefillOptions ForwardOptions(Request& rq, RequestStats& st, bool storing, bool last_only,
                                Status* load_error);
  void FillStats(const Request& rq, Clock::time_point t_compute, Clock::time_point t_done,
                 RequestStats* st) const;
  // Of R local prefix rows (remote rows read in part are not the disk's).
  uint64_t IdealBytes(const RequestStats& st, uint64_t R) const;

  const Model& model;
  const EngineOptions opts;
  const SystemRow& row;
  const ModelConfig c;
  const uint32_t row_bytes;    // one token's K (all KV heads), fp16
  const uint32_t probe_bytes;  // one token's probe-head keys
  uint64_t fingerprint = 0;
  std::unique_ptr<store::ChunkStore> store;
  // The store and, with --remote, the Redis tier below it: every lookup and
  // put of a request goes through here (reset before the store).
  std::unique_ptr<remote::StoreTiers> tiers;
  std::unique_ptr<cache::TieredCache> pools;
  std::unique_ptr<PooledReader> reader;
  LoadQueue queue;
  std::unique_ptr<LayerSource> source;
  std::unique_ptr<PromptWriter> writer;
  std::unique_ptr<CarProfile> profile;  // RetentionFrom::kProfile
  std::unique_ptr<ProbeProfile> probe_profile;  // probe heads with alpha_auto
  PeriodicTask maint;
};

}  // namespace tierkv::engine

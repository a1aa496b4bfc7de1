// The engine: opens the store and pools for a system's row, and runs a
// request as its steps (lookup, the layer source's reads, the forward pass,
// storing the prompt). docs/architecture.md follows a request through it.
#include "tierkv/engine.h"

#include <algorithm>
#include <string>

#include "engine/engine_impl.h"
#include "engine/far_rows.h"
#include "engine/options.h"
#include "engine/pool_entries.h"
#include "store/fingerprint.h"
#include "store/format.h"
#include "tierkv/logging.h"

namespace tierkv::engine {
namespace {

// CaR's score events for the chunk layers a request reuses (III-B3) when no
// scheduler raises them (ServeOptions::scheduler_events): +1 for entering
// the window and +1 for starting as the request begins, -2 when it
// finishes (this scope's end).
class ScoreEvents {
 public:
  ScoreEvents(cache::TieredCache* pools, std::vector<uint64_t> keys)
      : pools_(pools), keys_(std::move(keys)) {
    if (keys_.empty()) return;
    pools_->OnRequestEvent(keys_, cache::RequestEvent::kEnterWindow);
    pools_->OnRequestEvent(keys_, cache::RequestEvent::kStart);
  }
  ~ScoreEvents() {
    if (!keys_.empty()) pools_->OnRequestEvent(keys_, cache::RequestEvent::kFinish);
  }
  ScoreEvents(const ScoreEvents&) = delete;
  ScoreEvents& operator=(const ScoreEvents&) = delete;

 private:
  cache::TieredCache* pools_;
  std::vector<uint64_t> keys_;
};

}  // namespace

std::vector<std::string> OwnerFiles() { return {CarProfile::kFileName, ProbeProfile::kFileName}; }

uint64_t StoreFingerprint(const Model& model, const EngineOptions& o) {
  return store::Fingerprint(store::FingerprintInput{model.content_hash(), model.config().ToString(), o.tokenizer_hash,
                                                    store::KvDtype::kF16, o.chunk_tokens});
}


namespace {

// InvalidArgument naming chunk_tokens and the largest chunk one record of
// this model holds (a record's 4 KiB header lists its tokens and pages).
Status CheckChunkTokens(uint32_t chunk_tokens, uint32_t row_bytes, uint32_t probe_bytes) {
  const uint32_t most = std::min(store::MaxRecordTokens(store::RecordKind::kKeyValue, row_bytes),
                                 store::MaxRecordTokens(store::RecordKind::kProbeKeys, probe_bytes));
  if (chunk_tokens <= most) return Status::Ok();
  return Status::InvalidArgument("chunk_tokens " + std::to_string(chunk_tokens) +
                                 ": one record of this model holds at most " + std::to_string(most) +
                                 " tokens");
}

}  // namespace

Status Engine::Impl::OpenStore() {
  RETURN_IF_ERROR(CheckChunkTokens(opts.chunk_tokens, row_bytes, probe_bytes));
  store::StoreOptions so;
  so.dir = opts.cache_dir;
  so.owner_files = OwnerFiles();
  // A chunk leaving the store leaves the pools too: the same prefix may be
  // stored again with other K/V (a selective system's NR rows), and a pool
  // entry of the old copy must not serve the new one.
  so.on_chunk_removed = [this](uint64_t prefix_hash) {
    if (pools) ErasePoolEntries(pools.get(), prefix_hash, c.n_layers);  // null during recovery
  };
  so.fingerprint = StoreFingerprint(model, opts);
  fingerprint = so.fingerprint;
  so.model_description = c.ToString();
  so.chunk_tokens = opts.chunk_tokens;
  so.layers = static_cast<uint16_t>(c.n_layers);
  so.row_bytes = row_bytes;
  so.probe_bytes = probe_bytes;
  so.dtype = store::KvDtype::kF16;
  store::SetDiskBudget(&so, opts.disk_budget_bytes);  // the segment files' bound: live and dead records
  so.disk = opts.disk;
  ASSIGN_OR_RETURN(store, store::ChunkStore::Open(so));
  ASSIGN_OR_RETURN(tiers, remote::StoreTiers::Open(
                             store.get(), opts.remote,
                             remote::RemoteGeometry{fingerprint, so.layers, row_bytes, opts.chunk_tokens,
                                                    store::KvDtype::kF16,
                                                    static_cast<uint32_t>(RowsPerUnit(
                                                        ResolveUnit(opts.unit, opts.retention, SIZE_MAX, row_bytes),
                                                        row_bytes))},
                             AdmitFetched()));
  cache::CacheOptions co;
  co.device_bytes = opts.device_bytes;
  co.host_bytes = opts.host_bytes;
  co.policy = PolicyFor(opts.policy, row);
  ASSIGN_OR_RETURN(pools, cache::TieredCache::Create(co));
  return Status::Ok();
}

void Engine::Impl::StartParts() {
  reader = std::make_unique<PooledReader>(store.get(), pools.get(),
                                          ReaderGeometry{opts.chunk_tokens, row_bytes, probe_bytes});
  if (row.selection == Selection::kProbeHeads && opts.alpha_auto) {
    const double target = opts.probe_recall == kProbeRecallAuto ? ProbeRecallFor(opts.retention) : opts.probe_recall;
    probe_profile = std::make_unique<ProbeProfile>(opts.cache_dir, fingerprint, c, opts.retention, target);
    probe_profile->Load();
  }
  source = MakeLayerSource(
      SourceDeps{&c, &opts, &row, reader.get(), &queue, store.get(), probe_profile.get(), &model});
  writer = std::make_unique<PromptWriter>(model, tiers.get(), reader.get(), row.selective(),
                                          opts.exact_store);
  if (row.retention == RetentionFrom::kProfile) {
    profile = std::make_unique<CarProfile>(opts.cache_dir, fingerprint, c.n_layers, opts.retention);
    profile->Load();
  }
  queue.Start();
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  impl_->maint.Stop();
  impl_->queue.Stop();
  impl_->writer.reset();  // its store writer puts through the tiers
  impl_->tiers.reset();  // the remote tier's upload thread reads the store
  impl_->store.reset();  // before the pools its removal callback erases from
}

const EngineOptions& Engine::options() const { return impl_->opts; }

Result<uint64_t> Engine::Flush() {
  if (!impl_->store) return uint64_t{0};
  return impl_->store->DropAll();
}

store::ChunkStore* Engine::TEST_store() { return impl_->store.get(); }

uint64_t Engine::StoredBytes() const {
  if (!impl_->store) return 0;
  const auto st = impl_->store->stats();
  return st.live_bytes - st.reordered_bytes;
}

RemoteStats Engine::RemoteStatistics() const {
  return impl_->tiers ? impl_->tiers->remote_stats() : RemoteStats{};
}

void Engine::DrainRemote() {
  if (impl_->tiers) impl_->tiers->Drain();
}

store::StoreStats Engine::StoreStatistics() const {
  return impl_->store ? impl_->store->stats() : store::StoreStats{};
}

StoreBehindStats Engine::StoreBehindStatistics() const {
  return impl_->writer ? impl_->writer->behind().stats() : StoreBehindStats{};
}

void Engine::DrainStores() {
  if (impl_->writer) impl_->writer->behind().Drain();
}

cache::CacheStats Engine::PoolStatistics() const {
  return impl_->pools ? impl_->pools->stats() : cache::CacheStats{};
}

Result<std::unique_ptr<Engine>> Engine::Open(const Model& model, EngineOptions options) {
  RETURN_IF_ERROR(options.Validate());
  auto impl = std::make_unique<Impl>(model, std::move(options));
  if (impl->row.reuses()) {
    RETURN_IF_ERROR(impl->OpenStore());
    impl->StartParts();
  }
  auto engine = std::unique_ptr<Engine>(new Engine(std::move(impl)));
  Impl& im = *engine->impl_;
  if (im.opts.maintain_interval_ms > 0 && im.store) {
    Engine* e = engine.get();
    im.maint.Start("tierkv-maint", std::chrono::milliseconds(im.opts.maintain_interval_ms), [e] {
      auto r = e->Maintain();
      if (!r.ok()) {
        TIERKV_LOG(kWarn) << "engine maintenance: " << r.status().ToString();
      }
    });
  }
  return engine;
}

Result<std::vector<double>> Engine::Profile(std::span<const std::vector<int32_t>> prompts) {
  Impl& im = *impl_;
  if (!UsesProfile()) {
    return Status::InvalidArgument(
        "profile: only car (sparsity) and impress/spec with alpha auto (probe thresholds) use one");
  }
  if (im.probe_profile) {
    auto fit = im.probe_profile->Measure(im.model, prompts);
    if (!fit.ok() && !fit.status().IsNotFound()) return fit.status();
    if (!fit.ok()) {
      // No prompt to profile on: IMPRESS's rule decides until a request
      // long enough comes (Serve profiles on it).
      TIERKV_LOG(kWarn) << fit.status().message() << "; deciding by j^alpha (alpha " << im.opts.alpha
                        << ") until a longer request";
    }
  }
  if (!im.profile) return std::vector<double>{};
  return im.profile->Measure(im.model, prompts);
}

bool Engine::UsesProfile() const { return impl_->profile || impl_->probe_profile; }

std::vector<ProbeFit> Engine::ProbeFits() const {
  return impl_->probe_profile ? impl_->probe_profile->Fits() : std::vector<ProbeFit>{};
}

Result<MaintainResult> Engine::Maintain() {
  MaintainResult out;
  Impl& im = *impl_;
  // A removed or replaced cache directory is noticed here too when no
  // request stores anything; the store logs it once and its statistics
  // (directory_lost: /health, /metrics) say so, so this round just stops.
  if (im.store && !im.store->CheckDirectory().ok()) return out;
  if (im.row.reports_importance && im.store) {
    store::ReorderOptions ro;
    ro.max_runs = UINT32_MAX;  // a round covers every run with new reports
    ASSIGN_OR_RETURN(store::ReorderResult r, im.store->Reorder(ro));
    out.reordered_runs = r.runs;
    out.reorder_bytes_written = r.bytes_written;
  }
  return out;
}

size_t Engine::Impl::TailEnd(const store::LookupResult& m, size_t cap, const remote::FarRows& far) const {
  if (!row.selective() || far.chunks > 0) return 0;
  return std::min(m.matched_tokens, cap);
}

void Engine::Impl::ReadTail(const store::LookupResult& m, size_t end, Request& rq) {
  if (end <= rq.R) return;
  const auto t = Clock::now();
  Status s = ReadTailRows(*reader, m, rq.R, end, c.n_layers, &rq.tail, &rq.io);
  rq.tail_ms = MsSince(t);
  // A row that fails its checksum is never served: the rows are computed.
  if (!s.ok()) {
    TIERKV_LOG(kWarn) << "serve: computing the prefix's last " << end - rq.R << " rows: " << s.ToString();
    rq.tail = remote::FarRows{};
  }
}

size_t Engine::Impl::Reusable(const store::LookupResult& m, size_t cap) const {
  return remote::ReusableTokens(m, cap, row.selective(), opts.chunk_tokens);
}

remote::TierMatch Engine::Impl::LookupPrefix(std::span<const int32_t> tokens, uint64_t ns, size_t cap,
                                             bool first_attempt, const std::vector<uint32_t>& keep,
                                             RequestStats* st) {
  remote::TierMatch t = tiers->Lookup(
      tokens, remote::TierQuery{.ns = ns, .cap = cap, .whole_chunks = row.selective(),
                                .fall_through = first_attempt, .keep = keep});
  st->remote_important_chunks = t.far.chunks;
  st->remote_chunks = t.remote_chunks;
  st->remote_bytes = t.remote_bytes;
  st->remote_ms = t.remote_ms;
  return t;
}

remote::RemoteTier::AdmittedFn Engine::Impl::AdmitFetched() {
  // What comes down goes into the pools too: the request reads it from there.
  return [this](uint64_t prefix_hash, uint16_t layer, std::span<const char> payload) {
    AdmitChunkLayer(pools.get(), row.selective(), prefix_hash, layer, payload, opts.chunk_tokens, row_bytes,
                    probe_bytes);
  };
}

AheadDone Engine::FetchAhead(std::span<const int32_t> tokens, uint64_t cache_namespace) {
  Impl& im = *impl_;
  if (!im.tiers || !im.row.reuses() || tokens.size() < 2) return nullptr;
  // A reader of important parts fetches per request (nothing is kept).
  if (im.ReadsImportant(im.opts.retention)) return nullptr;
  return im.tiers->FetchAhead(tokens, tokens.size() - 1, cache_namespace);
}

std::vector<uint64_t> Engine::Impl::ScoreKeys(const store::LookupResult& m, size_t R) const {
  std::vector<uint64_t> keys;
  if (!row.score_events) return keys;
  for (size_t i = 0; i < R / opts.chunk_tokens; ++i) {
    for (int l = 0; l < c.n_layers; ++l) keys.push_back(PoolKey(EntryKind::kRows, m.prefix_hashes[i], l));
  }
  return keys;
}

PrefillOptions Engine::Impl::ForwardOptions(Request& rq, RequestStats& st, bool storing,
                                            bool last_only, Status* load_error) {
  PrefillOptions po;
  po.start_pos = static_cast<int>(rq.End());
  po.capture_kv = storing || rq.keep != nullptr;
  po.kv_dtype = KvDType::kF16;
  po.logits = last_only ? LogitsMode::kLast : LogitsMode::kAll;
  const bool order = opts.store_order == StoreOrder::kOn ||
                     (opts.store_order == StoreOrder::kSystem && row.orders_at_store);
  if (storing && order) rq.order = std::make_unique<StoreImportance>(c);
  if (rq.End() == 0 && !rq.order) return po;
  po.before_attention = [this, &rq, &st, load_error](const LayerView& v,
                                                    LayerPrefix* prefix) -> Status {
    if (rq.order) rq.order->Capture(v);
    if (rq.End() == 0) return Status::Ok();
    Status s = rq.R > 0 ? source->Supply(rq, v, prefix, &st.layers[v.layer]) : Status::Ok();
    if (s.ok()) s = AppendFarRows(c, rq, v.layer, prefix);
    if (s.ok() && rq.keep) s = rq.keep->AddPrefix(v.layer, *prefix);
    if (s.ok()) return s;
    *load_error = s;
    return Status::Cancelled("layer " + std::to_string(v.layer) + " load failed");
  };
  return po;
}

void Engine::Impl::FillStats(const Request& rq, Clock::time_point t_compute,
                             Clock::time_point t_done, RequestStats* st) const {
  rq.io.FillStats(st);
  st->identify_ms = rq.identify_ms;
  st->load_wait_ms = rq.load_ms + rq.tail_ms;  // the tail is read before the forward pass
  st->fallback_layers = rq.fallbacks;
  st->compute_ms = MsBetween(t_compute, t_done) - rq.load_ms - st->identify_ms;
  st->ttft_ms = MsBetween(rq.t0, t_done);
  // The tail's rows are read whole.
  st->ideal_bytes = IdealBytes(*st, rq.R) + 2 * (rq.tail.end - rq.tail.start) * row_bytes * st->layers.size();
}

uint64_t Engine::Impl::IdealBytes(const RequestStats& st, uint64_t R) const {
  if (!source) return 0;  // recompute reads nothing
  uint64_t sum = 0;
  for (const LayerTrace& L : st.layers) sum += source->IdealBytes(L, R);
  return sum;
}

Result<ServeResult> Engine::Impl::Attempt(std::span<const int32_t> tokens, const ServeOptions& so,
                                          Clock::time_point t0, int attempt, size_t cap,
                                          size_t* reused, Status* load_error) {
  const size_t n = tokens.size();
  const bool last_only = so.logits_from == std::numeric_limits<size_t>::max();
  ServeResult out;
  RequestStats& st = out.stats;
  const bool own_retention = so.retention >= 0 && so.retention != opts.retention;
  const double retention = own_retention ? so.retention : opts.retention;
  std::vector<double> layer_retention;
  if (profile) layer_retention = own_retention ? profile->LayerRetention(retention) : profile->LayerRetention();
  remote::TierMatch found;
  const uint64_t ns = so.cache_namespace;
  if (row.reuses()) {
    // Read-your-writes: a prompt stored behind a request before this one
    // that would extend this prompt's local match by a whole chunk.
    // The local lookup sizing the wait runs only while the writer has work.
    if (so.store_behind && attempt == 1 && writer->behind().busy()) {
      const size_t want = store->Lookup(tokens, ns).matched_tokens / opts.chunk_tokens * opts.chunk_tokens +
                          opts.chunk_tokens;
      if (want < tokens.size()) writer->behind().AwaitPrefix(tokens, ns, want, std::chrono::milliseconds(200));
    }
    found = LookupPrefix(tokens, ns, cap, attempt == 1 && so.remote_lookup, ImportantKeep(retention, layer_retention),
                         &st);
  }
  const store::LookupResult& m = found.local;
  const size_t R = found.reusable;
  Request rq(&m, R, t0, c.n_layers);
  rq.cache_namespace = ns;
  rq.far = std::move(found.far);
  st.lookup_ms = MsSince(t0);
  ReadTail(m, TailEnd(m, cap, rq.far), rq);  // nothing unless it ends past R
  const size_t E = rq.End();  // R, then the remote chunks read in part or the tail
  // A retry after a failed layer (whose rows are R's) reuses less than R:
  // a chunk less, not a row less of the tail.
  *reused = rq.tail.end > R ? R : E;
  st.prompt_tokens = n;
  st.attempts = attempt;
  st.reused_tokens = E;
  st.computed_tokens = n - E;
  st.layers.resize(c.n_layers);
  rq.own_retention = own_retention;
  rq.retention = retention;
  rq.layer_retention = std::move(layer_retention);
  if (so.keep_kv) rq.keep = std::make_shared<Sequence>(c, static_cast<int>(n));
  ScoreEvents events(pools.get(), so.scheduler_events ? std::vector<uint64_t>{} : ScoreKeys(m, R));
  if (R > 0) rq.state = source->Start(rq);
  // The prompt's K/V go to the store (systems that reuse keep what they compute).
  // Not after remote rows read in part: the store holds whole chunks, and
  // the chunks between R and the new ones are not local.
  const bool storing = so.store && row.reuses() && rq.far.chunks == 0;
  PrefillOptions po = ForwardOptions(rq, st, storing, last_only, load_error);
  const auto t_compute = Clock::now();
  auto r = model.Prefill(tokens.subspan(E), po);
  const auto t_done = Clock::now();
  // Reads still in flight point at this attempt's lookup: let them finish
  // before it goes away (only after a failed layer, or for a layer the
  // request never reached).
  if (rq.state) {
    for (const auto& f : rq.state->Fetches()) Await(*f).IgnoreError();
  }
  if (!r.ok()) return r.status();
  if (R > 0) source->Finish(rq, st);
  FillStats(rq, t_compute, t_done, &st);
  if (last_only) {
    out.logits = std::move(r->logits);
    out.logits_rows = 1;
  } else {
    const size_t V = static_cast<size_t>(c.vocab_size);
    out.logits.assign(r->logits.begin() + (so.logits_from - E) * V, r->logits.end());
    out.logits_rows = n - so.logits_from;
  }
  if (rq.keep) {
    RETURN_IF_ERROR(rq.keep->AddComputed(r->kv, r->kv_dtype, r->n_tokens, static_cast<int>(E)));
    out.sequence = std::move(rq.keep);
  }
  if (storing) writer->Store(tokens, rq, std::move(r->kv), &st, so.store_behind);
  return out;
}

Result<ServeResult> Engine::Serve(std::span<const int32_t> tokens, const ServeOptions& so) {
  Impl& im = *impl_;
  const size_t n = tokens.size();
  if (n == 0) return Status::InvalidArgument("serve: empty prompt");
  if (so.retention >= 0) {
    if (!(so.retention > 0 && so.retention <= 1)) {
      return Status::InvalidArgument("retention: " + std::to_string(so.retention) + " is not in (0, 1]");
    }
    if (!im.row.selective() && so.retention != 1) {
      return Status::InvalidArgument("retention: " + std::string(SystemName(im.opts.system)) +
                                     " reads every prefix row (only 1 is accepted); a selective "
                                     "system reads a share");
    }
  }
  const bool last_only = so.logits_from == std::numeric_limits<size_t>::max();
  if (!last_only && so.logits_from >= n) {
    return Status::InvalidArgument("serve: logits_from " + std::to_string(so.logits_from) +
                                   " is not below the prompt's " + std::to_string(n) + " tokens");
  }
  if (im.profile && im.profile->LayerRetention().empty()) {
    // No profile yet: this request's prompt is the profiling prompt.
    const std::vector<int32_t> own(tokens.begin(), tokens.end());
    RETURN_IF_ERROR(im.profile->Measure(im.model, std::span(&own, 1)).status());
  }
  if (im.probe_profile && !im.probe_profile->Fitted() &&
      ProbeProfile::Usable(n, static_cast<size_t>(im.c.context_length))) {
    // Likewise (a shorter prompt decides by j^alpha until a longer one comes).
    const std::vector<int32_t> own(tokens.begin(), tokens.end());
    RETURN_IF_ERROR(im.probe_profile->Measure(im.model, std::span(&own, 1)).status());
  }
  const auto t0 = Clock::now();
  // Stored data that fails (a damaged record, an I/O error) never fails the
  // request: each attempt reuses strictly fewer rows than the one before
  // (the store has dropped what failed its checks), down to computing
  // everything, which reads nothing.
  size_t cap = last_only ? n - 1 : so.logits_from;
  for (int attempt = 1;; ++attempt) {
    size_t reused = 0;
    Status load_error;
    auto r = im.Attempt(tokens, so, t0, attempt, cap, &reused, &load_error);
    if (r.ok() || load_error.ok() || reused == 0) return r;
    TIERKV_LOG(kWarn) << "serve: " << load_error.ToString()
                      << "; computing the request again with what the store still holds";
    cap = reused - 1;
  }
}

}  // namespace tierkv::engine

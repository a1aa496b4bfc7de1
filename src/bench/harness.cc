// The measuring harness (tierkv/tools/harness.h): the timed rounds.
#include "tierkv/tools/harness.h"

#include <algorithm>
#include <cmath>

#include "bench/quality.h"
#include "tierkv/tools/latency.h"
#include "tierkv/logging.h"

namespace tierkv::bench {

namespace {

using nlohmann::json;

// What one system measured, summed over rounds.
struct Acc {
  std::vector<double> ttft, round_ttft;
  std::vector<double> layer_wait, layer_recall, layer_rows, fallback;
  std::vector<int> recall_n;
  double wait = 0, identify = 0, compute = 0, lookup = 0, reused_rows = 0;
  uint64_t bytes = 0, chunks = 0, dev = 0, host = 0, disk = 0, dev_bytes = 0, host_bytes = 0;
  uint64_t reordered = 0, maintain_errors = 0;
  std::vector<engine::ProbeFit> probe_fits;  // alpha auto
  double ideal_bytes = 0;  // what the rows used would take, read exactly (RequestStats)
};

void ShowProgress(const HarnessOptions& o, const std::string& what, size_t done, size_t total) {
  if (o.progress) o.progress(what, done, total);
}

// Stores every prefix (its stored_share) through as-like requests, then
// reads every record once, unmeasured: otherwise the first system measured
// reads a disk still busy with what was just written (about 25% slower
// than the same system run second), and only it finds nothing in the
// host's cache. Returns the stored K/V bytes.
Result<uint64_t> WriteStore(const Model& model, std::span<const TaskRequest> reqs, const HarnessOptions& o) {
  engine::EngineOptions w = o.base;
  w.system = engine::System::kAsLike;
  // Exact rows, with the importance-ordered copy when store_order asks for
  // one (system or on): every system reads this one store.
  if (w.store_order == engine::StoreOrder::kSystem) w.store_order = engine::StoreOrder::kOn;
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> writer, engine::Engine::Open(model, w));
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& p = reqs[i].prefix;
    size_t n = std::clamp<size_t>(static_cast<size_t>(o.stored_share * static_cast<double>(p.size())), 1, p.size());
    if (o.whole_chunks) n -= n % o.base.chunk_tokens;
    if (n == 0) continue;  // shorter than a chunk: nothing to store
    auto s = writer->Serve(std::span(p).first(n));
    if (!s.ok()) return Status(s.status().code(), "storing a prefix: " + s.status().message());
    ShowProgress(o, "storing prefixes", i + 1, reqs.size());
  }
  const uint64_t stored = writer->StoredBytes();
  engine::ServeOptions so;
  so.store = false;
  for (const TaskRequest& r : reqs) {
    auto s = writer->Serve(r.Joined(), so);
    if (!s.ok()) return Status(s.status().code(), "reading the stored prefixes once: " + s.status().message());
  }
  return stored;
}

void AddRequest(const engine::RequestStats& st, Acc* A) {
  A->ttft.push_back(st.ttft_ms);
  const auto& L = st.layers;
  A->ideal_bytes += static_cast<double>(st.ideal_bytes);
  for (std::vector<double>* v : {&A->fallback, &A->layer_wait, &A->layer_recall, &A->layer_rows}) v->resize(L.size(), 0.0);
  A->recall_n.resize(L.size(), 0);
  for (size_t l = 0; l < L.size(); ++l) {
    A->fallback[l] += L[l].fallback;
    A->layer_wait[l] += L[l].wait_ms;
    A->layer_rows[l] += static_cast<double>(L[l].rows);
    if (L[l].recall >= 0) {
      A->layer_recall[l] += L[l].recall;
      A->recall_n[l]++;
    }
  }
  A->reused_rows += static_cast<double>(st.reused_tokens);
  A->wait += st.load_wait_ms;
  A->identify += st.identify_ms;
  A->compute += st.compute_ms;
  A->lookup += st.lookup_ms;
  A->bytes += st.disk_bytes_read;
  A->dev_bytes += st.device_bytes_read;
  A->host_bytes += st.host_bytes_read;
  A->chunks += st.disk_chunks_read;
  A->dev += st.device_hits;
  A->host += st.host_hits;
  A->disk += st.disk_reads;
}

// One round of one system: a fresh engine, warm-up, maintenance, measured passes.
Status MeasureRound(const Model& model, std::span<const TaskRequest> reqs, const HarnessOptions& o, size_t si,
                    int round, uint64_t stored, Acc* A) {
  const engine::System sys = o.systems[si];
  const std::string name(engine::SystemName(sys));
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> eng,
                   engine::Engine::Open(model, o.EngineFor(sys, stored)));
  if (round == 0 && eng->UsesProfile() && (engine::TraitsOf(sys).profiled || eng->ProbeFits().empty())) {
    // Profiling prompts, unmeasured: car's once per system; the probe
    // profile once (systems sharing it, and later rounds, open the saved one).
    RETURN_IF_ERROR(eng->Profile(ProfilingPrompts(reqs)).status());
  }
  if (A->probe_fits.empty()) A->probe_fits = eng->ProbeFits();
  engine::ServeOptions so;
  so.store = false;  // every system sees the same store
  for (int pass = 0; pass < o.warmup; ++pass) {
    for (const TaskRequest& r : reqs) RETURN_IF_ERROR(eng->Serve(r.Joined(), so).status());
  }
  // Reordering is an optimisation: a round that fails (a full disk) leaves
  // the store as it was, and the system runs without it.
  auto maint = eng->Maintain();
  if (maint.ok()) {
    A->reordered += maint->reordered_runs;
  } else {
    ++A->maintain_errors;
    TIERKV_LOG(kWarn) << name << ": maintenance skipped: " << maint.status().ToString();
  }
  // Every system, maintaining or not, gets one unmeasured request here: a
  // forward pass after seconds without one (maintenance, or any pause) was
  // measured up to 4x slower, and only the maintaining systems had the gap.
  if (!reqs.empty()) RETURN_IF_ERROR(eng->Serve(reqs.front().Joined(), so).status());
  double sum = 0;
  const size_t total = reqs.size() * static_cast<size_t>(o.repeat);
  for (int pass = 0; pass < o.repeat; ++pass) {
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSIGN_OR_RETURN(engine::ServeResult s, eng->Serve(reqs[i].Joined(), so));
      AddRequest(s.stats, A);
      sum += s.stats.ttft_ms;
      TIERKV_LOG(kDebug) << name << " round " << round + 1 << " request " << i + 1 << ": ttft " << s.stats.ttft_ms
                         << " ms (lookup " << s.stats.lookup_ms << ", identify " << s.stats.identify_ms << ", load wait "
                         << s.stats.load_wait_ms << ", compute " << s.stats.compute_ms << "), reused "
                         << s.stats.reused_tokens << " computed " << s.stats.computed_tokens;
      ShowProgress(o, name + " round " + std::to_string(round + 1) + "/" + std::to_string(o.rounds),
               pass * reqs.size() + i + 1, total);
    }
  }
  A->round_ttft.push_back(sum / static_cast<double>(total));
  return Status::Ok();
}

json PerLayer(const std::vector<double>& v, double n) {
  json a = json::array();
  for (double x : v) a.push_back(x / n);
  return a;
}

json Summary(const Acc& A, const HarnessOptions& o, engine::System sys) {
  const double n = static_cast<double>(A.ttft.size());
  const LatencySummary t = Summarize(A.ttft);
  json j;
  j["ttft_ms_mean"] = t.mean;
  j["ttft_ms_p50"] = t.p50;
  j["ttft_ms_p99"] = t.p99;
  j["ttft_ms_mean_by_round"] = A.round_ttft;
  j["lookup_ms_mean"] = A.lookup / n;
  j["load_wait_ms_mean"] = A.wait / n;
  j["identify_ms_mean"] = A.identify / n;
  j["compute_ms_mean"] = A.compute / n;
  // Bytes and chunks: per round (rounds read about the same).
  const auto passes = static_cast<uint64_t>(o.rounds);
  j["disk_bytes_read"] = A.bytes / passes;
  j["disk_chunks_read"] = A.chunks / passes;
  j["device_bytes_read"] = A.dev_bytes / passes;
  j["host_bytes_read"] = A.host_bytes / passes;
  // Chunk-layer accesses through the pools: a selective system's access is
  // a device hit when the pool had every row it needed.
  const uint64_t accesses = A.dev + A.host + A.disk;
  j["device_hit_ratio"] = accesses ? static_cast<double>(A.dev) / static_cast<double>(accesses) : 0.0;
  j["reordered_runs"] = A.reordered / passes;
  j["maintain_errors"] = A.maintain_errors;
  // Per layer: the mean load wait (spec's should shrink against impress's
  // where its prediction was right), the share of the reused rows used, and
  // spec's recall.
  j["layer_load_wait_ms"] = PerLayer(A.layer_wait, n);
  j["layer_retention"] = PerLayer(A.layer_rows, A.reused_rows > 0 ? A.reused_rows : 1.0);
  // Bytes read from disk per byte the used rows need; with pools that hit,
  // below 1 says little: zero pools show the read path's own amplification.
  j["ideal_bytes"] = A.ideal_bytes / static_cast<double>(passes);
  j["disk_bytes_per_ideal"] = A.ideal_bytes > 0 ? static_cast<double>(A.bytes) / A.ideal_bytes : 0.0;
  j["layer_fallback_share"] = PerLayer(A.fallback, n);
  if (!A.probe_fits.empty()) j["probe_fit"] = ProbeFitJson(A.probe_fits);
  if (engine::TraitsOf(sys).speculates) {
    json lr = json::array();
    for (size_t l = 0; l < A.layer_recall.size(); ++l) {
      lr.push_back(A.recall_n[l] ? json(A.layer_recall[l] / A.recall_n[l]) : json());
    }
    j["layer_recall"] = lr;
  }
  return j;
}

}  // namespace

engine::EngineOptions HarnessOptions::EngineFor(engine::System sys, uint64_t stored) const {
  engine::EngineOptions e = base;
  e.system = sys;
  e.device_bytes = static_cast<uint64_t>(device_share * static_cast<double>(stored));
  e.host_bytes = static_cast<uint64_t>(host_share * static_cast<double>(stored));
  return e;
}

Status HarnessOptions::Validate() const {
  if (systems.empty()) return Status::InvalidArgument("systems: at least one");
  if (!(base.retention > 0 && base.retention <= 1)) return Status::InvalidArgument("retention: must be in (0, 1]");
  for (double s : {device_share, host_share, stored_share}) {
    if (!(s >= 0 && s <= 1)) return Status::InvalidArgument("device_share, host_share, stored_share: must be in [0, 1]");
  }
  if (warmup < 0 || rounds < 0 || repeat < 1) return Status::InvalidArgument("warmup and rounds >= 0, repeat >= 1");
  if (rounds == 0 && !quality) return Status::InvalidArgument("rounds 0 (the quality pass alone) needs quality");
  return Status::Ok();
}

std::vector<std::vector<int32_t>> ProfilingPrompts(std::span<const TaskRequest> reqs) {
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < std::min(kProfilingPrompts, reqs.size()); ++i) out.push_back(reqs[i].prefix);
  return out;
}

json ProbeFitJson(const std::vector<engine::ProbeFit>& fits) {
  json pf = json::array();
  for (const engine::ProbeFit& f : fits) {
    pf.push_back({{"threshold", std::isinf(f.threshold) ? json("never") : json(f.threshold)},
                  {"recall", f.recall},
                  {"decided", f.decided},
                  {"decided_recall", f.decided_recall}});
  }
  return pf;
}

Result<json> RunHarness(const Model& model, std::span<const TaskRequest> reqs, const HarnessOptions& o) {
  RETURN_IF_ERROR(o.Validate());
  if (reqs.empty()) return Status::InvalidArgument("no requests");
  // A run of systems that reuse nothing (bench --systems recompute) reads
  // no store: none is written.
  const bool reuses = std::any_of(o.systems.begin(), o.systems.end(),
                                  [](engine::System s) { return engine::TraitsOf(s).reuses; });
  uint64_t stored = 0;
  if (reuses) {
    ASSIGN_OR_RETURN(stored, WriteStore(model, reqs, o));
  }
  json out;
  out["requests"] = reqs.size();
  out["repeat"] = o.repeat;
  out["rounds"] = o.rounds;
  out["warmup"] = o.warmup;
  out["retention"] = o.base.retention;
  out["stored_share"] = o.stored_share;
  out["stored_bytes"] = stored;
  const engine::EngineOptions pools = o.EngineFor(engine::System::kAsLike, stored);
  out["device_bytes"] = pools.device_bytes;
  out["host_bytes"] = pools.host_bytes;
  std::vector<Acc> acc(o.systems.size());
  for (int round = 0; round < o.rounds; ++round) {
    for (size_t i = 0; i < o.systems.size(); ++i) {
      const size_t si = round % 2 == 0 ? i : o.systems.size() - 1 - i;
      Status s = MeasureRound(model, reqs, o, si, round, stored, &acc[si]);
      if (!s.ok()) return Status(s.code(), std::string(engine::SystemName(o.systems[si])) + ": " + s.message());
    }
  }
  json per = json::object();
  for (size_t si = 0; si < o.systems.size(); ++si) {
    const std::string name(engine::SystemName(o.systems[si]));
    per[name] = o.rounds > 0 ? Summary(acc[si], o, o.systems[si]) : json::object();
  }
  if (o.quality) RETURN_IF_ERROR(AddQuality(model, reqs, o, stored, &per));
  out["systems"] = per;
  return out;
}

}  // namespace tierkv::bench

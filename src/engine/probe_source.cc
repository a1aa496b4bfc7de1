#include "engine/probe_source.h"

#include <numeric>

#include "engine/all_rows_source.h"
#include "engine/head_scores.h"
#include "engine/options.h"

namespace tierkv::engine {
namespace {

Status ReadProbeKeys(PooledReader& reader, const store::LookupResult& m, size_t R, int l, Fetch& f,
                     IoCounts* io) {
  return reader.ReadProbes(m, R, l, &f.probe_keys, io);
}

}  // namespace

ProbeSource::ProbeSource(const SourceDeps& deps) : d_(deps), h2o_(deps) {
  identify_.retention = d_.options->retention;
  identify_.alpha = d_.options->alpha;
  identify_.aggregation = ToSelect(d_.options->aggregation);
}

std::unique_ptr<SourceState> ProbeSource::Start(Request& rq) {
  auto st = std::make_unique<ProbeState>(d_.config->n_layers);
  StartInto(rq, *st);
  return st;
}

void ProbeSource::StartInto(Request& rq, ProbeState& st) {
  // The probe keys do not depend on the queries: every layer's now. They
  // are submitted before any all-keys read: the loader serves a layer's
  // jobs in submission order, and the probes decide first.
  FetchEveryLayer(d_, rq, st, &st.probe_fetch, &ReadProbeKeys);
  std::vector<bool> hint;
  {
    MutexLock l(&mu_);
    hint = fell_back_last_;
  }
  for (int l = 0; l < d_.config->n_layers; ++l) {
    if (l >= static_cast<int>(hint.size()) || !hint[l]) continue;
    if (d_.options->fallback == ProbeFallback::kAllRows) {
      st.whole[l] = FetchLayer(d_, rq, st, l, &ReadWholeRows);
    } else {
      h2o_.FetchKeys(rq, st, l);
    }
  }
}

StartReads ProbeSource::QueryFreeReads() const {
  return {&ReadProbeKeys, EntryKind::kProbe, d_.reader->geometry().probe_bytes};
}

uint64_t ProbeSource::IdealBytes(const LayerTrace& trace, uint64_t R) const {
  const ReaderGeometry& g = d_.reader->geometry();
  if (trace.fallback) return (R + trace.rows) * g.row_bytes;
  return R * g.probe_bytes + 2 * trace.rows * g.row_bytes;
}

void ProbeSource::Finish(Request& rq, const RequestStats& stats) {
  const int L = d_.config->n_layers;
  {
    MutexLock l(&mu_);
    fell_back_last_.assign(L, false);
    for (int i = 0; i < L; ++i) fell_back_last_[i] = stats.layers[i].fallback;
  }
  // Fallback reads requested at the start for a layer that then used its
  // probes were read for nothing; they still count as read.
  const ProbeState& st = rq.StateAs<ProbeState>();
  for (int i = 0; i < L; ++i) {
    if (stats.layers[i].fallback) continue;
    if (st.key_fetch[i]) rq.io.Add(st.key_fetch[i]->io);
    if (st.whole[i]) rq.io.Add(st.whole[i]->io);
  }
}

select::ProbeDecision ProbeSource::Decide(Request& rq, const LayerView& view, const std::string& keys) const {
  const ModelConfig& c = *d_.config;
  const int P = select::ProbeHeads(c.n_kv_heads);
  std::vector<std::vector<float>> scores =
      AllHeadScores(view, c, P, reinterpret_cast<const uint16_t*>(keys.data()),
                    static_cast<size_t>(P) * c.head_dim(), rq.R);
  ForSelection(*d_.options, &scores);
  // IMPRESS's j^alpha unless a fitted profile says otherwise (fitted at
  // the engine's retention: a request with its own decides by j^alpha).
  const double fitted = d_.probe_profile && !rq.own_retention ? d_.probe_profile->Threshold(view.layer) : -1;
  select::IdentifyOptions io = identify_;
  io.retention = rq.retention;
  // The probes decide per row; the shared set is taken in whole selection units.
  return select::DecideWithProbes(scores, io, fitted, RowGroups(d_, rq));
}

Result<select::ProbeDecision> ProbeSource::Identify(Request& rq, LayerWork& work) {
  const int layer = work.view.layer;
  std::string own;
  const std::string* keys = &own;
  if (const auto& pf = rq.StateAs<ProbeState>().probe_fetch[layer]) {
    RETURN_IF_ERROR(rq.Use(*pf, &work.io_ms));
    keys = &pf->probe_keys;
  } else {
    RETURN_IF_ERROR(work.Timed([&] { return d_.reader->ReadProbes(*rq.m, rq.R, layer, &own, &work.io); }));
  }
  select::ProbeDecision d = Decide(rq, work.view, *keys);
  work.trace->fallback = !d.use_probes;
  if (!d.use_probes) {
    ++rq.fallbacks;
  } else if (d_.row->reports_importance) {
    // What reordering packs by: the rows this layer found important.
    d_.store->ReportImportance(*rq.m, static_cast<uint16_t>(layer), d.summed);
  }
  return d;
}

Status ProbeSource::ReadShared(Request& rq, LayerWork& work, const std::vector<int32_t>& shared,
                               const Supplied* given, LayerPrefix* prefix) {
  const ModelConfig& c = *d_.config;
  const int layer = work.view.layer;
  const size_t rb = d_.reader->geometry().row_bytes;
  const size_t hb = static_cast<size_t>(c.head_dim()) * 2;
  SelectiveLayer& L = rq.layers[layer];
  L.k.assign(shared.size() * rb, '\0');
  L.v.assign(shared.size() * rb, '\0');
  rq.identify_ms += work.BusyMs();
  RETURN_IF_ERROR(work.Timed([&] {
    return d_.reader->ReadSelected(*rq.m, layer, shared, L.k.data(), L.v.data(), ReadFor::kDemand,
                                   &work.io, given);
  }));
  L.positions = shared;
  prefix->heads.resize(c.n_kv_heads);
  for (int h = 0; h < c.n_kv_heads; ++h) {
    prefix->heads[h] = KvRows{L.k.data() + h * hb, L.v.data() + h * hb, KvDType::kF16, shared.size(),
                              static_cast<size_t>(c.kv_dim()), static_cast<size_t>(c.kv_dim()),
                              L.positions.data()};
  }
  work.trace->rows = shared.size();
  return Status::Ok();
}

Status ProbeSource::AllRows(Request& rq, LayerWork& work, LayerPrefix* prefix) {
  const int layer = work.view.layer;
  rq.identify_ms += work.BusyMs();
  const std::string* k;
  const std::string* v;
  if (const auto& whole = rq.StateAs<ProbeState>().whole[layer]) {
    RETURN_IF_ERROR(rq.Use(*whole, &work.io_ms));
    k = &whole->k;
    v = &whole->v;
  } else {
    SelectiveLayer& L = rq.layers[layer];
    RETURN_IF_ERROR(work.Timed([&] { return d_.reader->ReadWholeLayer(*rq.m, rq.R, layer, &L.k, &L.v, &work.io); }));
    k = &L.k;
    v = &L.v;
  }
  WholeRowsPrefix(*d_.config, rq.R, *k, *v, prefix);
  work.trace->rows = rq.R;
  return Status::Ok();
}

Status ProbeSource::Fallback(Request& rq, LayerWork& work, LayerPrefix* prefix, std::vector<int32_t>* selected) {
  if (d_.options->fallback == ProbeFallback::kH2o) return h2o_.Select(rq, work, prefix, selected);
  RETURN_IF_ERROR(AllRows(rq, work, prefix));
  if (selected) {
    selected->resize(rq.R);
    std::iota(selected->begin(), selected->end(), 0);
  }
  return Status::Ok();
}

Status ProbeSource::SupplyLayer(Request& rq, LayerWork& work, LayerPrefix* prefix) {
  ASSIGN_OR_RETURN(select::ProbeDecision d, Identify(rq, work));
  if (!d.use_probes) return Fallback(rq, work, prefix, nullptr);
  return ReadShared(rq, work, d.selected, nullptr, prefix);
}

}  // namespace tierkv::engine

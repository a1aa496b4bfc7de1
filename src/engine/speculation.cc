#include "engine/speculation.h"

namespace tierkv::engine {

std::unique_ptr<SourceState> SpeculatingSource::Start(Request& rq) {
  auto st = std::make_unique<SpecState>(d_.config->n_layers);
  probes_.StartInto(rq, *st);
  MutexLock l(&mu_);
  for (int i = 0; i < d_.config->n_layers && i < static_cast<int>(recall_.size()); ++i) {
    st->speculate[i] = recall_[i] >= d_.options->spec_min_recall;
  }
  return st;
}

void SpeculatingSource::Finish(Request& rq, const RequestStats& stats) {
  probes_.Finish(rq, stats);
  const int L = d_.config->n_layers;
  MutexLock l(&mu_);
  recall_.resize(L, 1.0);
  for (int i = 0; i < L; ++i) {
    if (stats.layers[i].recall >= 0) {
      recall_[i] = kRecallMemory * recall_[i] + (1 - kRecallMemory) * stats.layers[i].recall;
    }
  }
}

void SpeculatingSource::ReadAhead(Request& rq, int layer, std::vector<int32_t> rows) {
  const store::LookupResult* m = rq.m;
  PooledReader* reader = d_.reader;
  SpecState& st = rq.StateAs<SpecState>();
  st.prefetch[layer] = st.Track(d_.queue->Read(
      rq.t0, layer,
      [reader, m, layer](Fetch& f, IoCounts* io) {
        const size_t rb = reader->geometry().row_bytes;
        f.k.assign(f.rows.size() * rb, '\0');
        f.v.assign(f.rows.size() * rb, '\0');
        if (f.rows.empty()) return Status::Ok();
        return reader->ReadSelected(*m, layer, f.rows, f.k.data(), f.v.data(), ReadFor::kSpeculation, io);
      },
      std::move(rows)));
}

Status SpeculatingSource::UseShared(Request& rq, LayerWork& work, const std::vector<int32_t>& shared,
                                    LayerPrefix* prefix) {
  const int layer = work.view.layer;
  const std::shared_ptr<Fetch> pre = rq.StateAs<SpecState>().prefetch[layer];
  if (!pre) return probes_.ReadShared(rq, work, shared, nullptr, prefix);
  // Rows the prediction got right come from the read ahead; the others are
  // read beside it (`pre->rows` is fixed when it is issued). The rows it
  // used enter the pools with this read.
  Supplied given;
  given.rows = pre->rows;
  given.k = &pre->k;
  given.v = &pre->v;
  given.ready = [&] { return rq.Use(*pre); };  // inside ReadShared's timed read
  RETURN_IF_ERROR(probes_.ReadShared(rq, work, shared, &given, prefix));
  work.trace->completed_ms = pre->completed_ms;
  return Status::Ok();
}

Result<std::vector<int32_t>> SpeculatingSource::FromQueries(Request& rq, LayerWork& work) {
  const LayerView& v = work.view;
  const int next = v.layer + 1;
  const std::shared_ptr<Fetch>& keys = rq.StateAs<SpecState>().probe_fetch[next];
  if (!keys || !v.x || !d_.model) return std::vector<int32_t>{};
  // Read at the start with every layer's; counted when layer l+1 uses them,
  // and a failed read is layer l+1's to report: no prediction here.
  if (!Await(*keys, &work.io_ms).ok()) return std::vector<int32_t>{};
  const ModelConfig& c = *d_.config;
  const int P = select::ProbeHeads(c.n_kv_heads);
  std::vector<float> q, k;
  RETURN_IF_ERROR(d_.model->ProjectQk(next, v.x, v.x_stride, v.n_new, v.start_pos, P, &q, &k));
  const size_t kw = static_cast<size_t>(P) * c.head_dim(), qw = kw * c.group();
  // The new rows' own keys stand in for their values: scoring reads no values.
  const LayerView ahead{next, v.n_new, v.start_pos, q.data(), qw, k.data(), k.data(), kw};
  select::ProbeDecision d = probes_.Decide(rq, ahead, keys->probe_keys);
  if (!d.use_probes) return std::vector<int32_t>{};
  return std::move(d.selected);
}

Status SpeculatingSource::PredictNext(Request& rq, LayerWork& work, const std::vector<int32_t>* shared) {
  const int next = work.view.layer + 1;
  if (next >= d_.config->n_layers) return Status::Ok();
  std::vector<int32_t> predicted;
  if (d_.options->spec_predictor == SpecPredictor::kQueries) {
    // Counted as identification: it is the next layer's, made early.
    const auto a = Clock::now();
    const double waited = work.io_ms;
    ASSIGN_OR_RETURN(predicted, FromQueries(rq, work));
    rq.identify_ms += MsSince(a) - (work.io_ms - waited);
  } else if (shared) {
    // Only after a layer whose probes agreed: a layer that fell back is
    // usually followed by another, which reads all keys anyway (measured:
    // reading ahead there doubled the bytes read).
    predicted = *shared;
  }
  if (predicted.empty()) return Status::Ok();
  // The read ahead starts once this layer has its own rows: the disk is then
  // idle while the layer computes, and it does not lengthen this layer's read.
  // Rows the pools hold are left to the next layer's own read (a copy on the
  // compute thread): handing them to the load thread only adds a wait.
  SpecState& st = rq.StateAs<SpecState>();
  if (st.speculate[next]) {
    std::vector<int32_t> rows = d_.reader->NotPooled(*rq.m, next, predicted);
    if (!rows.empty()) ReadAhead(rq, next, std::move(rows));
  }
  st.predicted[next] = std::move(predicted);
  return Status::Ok();
}

Status SpeculatingSource::SupplyLayer(Request& rq, LayerWork& work, LayerPrefix* prefix) {
  const int layer = work.view.layer;
  const std::shared_ptr<Fetch> pre = rq.StateAs<SpecState>().prefetch[layer];
  if (pre) {
    work.trace->issued_ms = pre->issued_ms;
    work.trace->speculated = true;
  }
  ASSIGN_OR_RETURN(select::ProbeDecision d, probes_.Identify(rq, work));
  std::vector<int32_t> selected;
  if (d.use_probes) {
    RETURN_IF_ERROR(UseShared(rq, work, d.selected, prefix));
    selected = std::move(d.selected);
  } else {
    if (pre) {
      // Read for nothing; still counted.
      RETURN_IF_ERROR(rq.Use(*pre, &work.io_ms));
    }
    RETURN_IF_ERROR(probes_.Fallback(rq, work, prefix, &selected));
  }
  RETURN_IF_ERROR(PredictNext(rq, work, d.use_probes ? &selected : nullptr));
  const std::vector<int32_t>& predicted = rq.StateAs<SpecState>().predicted[layer];
  if (!predicted.empty()) work.trace->recall = select::Recall(predicted, selected);
  return Status::Ok();
}

}  // namespace tierkv::engine

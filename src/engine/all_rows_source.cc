#include "engine/all_rows_source.h"

namespace tierkv::engine {

Status ReadWholeRows(PooledReader& reader, const store::LookupResult& m, size_t R, int layer, Fetch& f,
                     IoCounts* io) {
  return reader.ReadWholeLayer(m, R, layer, &f.k, &f.v, io);
}

void WholeRowsPrefix(const ModelConfig& c, size_t R, const std::string& k, const std::string& v,
                     LayerPrefix* prefix) {
  prefix->heads.resize(c.n_kv_heads);
  const size_t hb = static_cast<size_t>(c.head_dim()) * 2;
  for (int h = 0; h < c.n_kv_heads; ++h) {
    prefix->heads[h] = KvRows{k.data() + h * hb, v.data() + h * hb, KvDType::kF16, R,
                              static_cast<size_t>(c.kv_dim()), static_cast<size_t>(c.kv_dim()), nullptr};
  }
}

std::unique_ptr<SourceState> AllRowsSource::Start(Request& rq) {
  auto st = std::make_unique<AllRowsState>(d_.config->n_layers);
  FetchEveryLayer(d_, rq, *st, &st->whole, &ReadWholeRows);
  return st;
}

StartReads AllRowsSource::QueryFreeReads() const {
  return {&ReadWholeRows, EntryKind::kWhole, 2 * d_.reader->geometry().row_bytes};
}

uint64_t AllRowsSource::IdealBytes(const LayerTrace&, uint64_t R) const {
  return 2 * R * d_.reader->geometry().row_bytes;
}

Status AllRowsSource::Supply(Request& rq, const LayerView& view, LayerPrefix* prefix,
                             LayerTrace* trace) {
  Fetch& f = *rq.StateAs<AllRowsState>().whole[view.layer];
  double wait = 0;
  Status s = rq.Use(f, &wait);
  const auto w1 = Clock::now();
  rq.load_ms += wait;
  trace->wait_ms = wait;
  trace->issued_ms = f.issued_ms;
  trace->completed_ms = f.completed_ms;
  trace->consumed_ms = MsBetween(rq.t0, w1);
  if (!s.ok()) return s;
  trace->rows = rq.R;
  trace->retention = 1.0;
  WholeRowsPrefix(*d_.config, rq.R, f.k, f.v, prefix);
  return Status::Ok();
}

}  // namespace tierkv::engine

#include "engine/h2o_source.h"

#include <cstring>
#include <numeric>

#include "engine/head_scores.h"
#include "select/importance.h"

namespace tierkv::engine {
namespace {

// Rows 0..R-1: every row of R.
std::vector<int32_t> AllRows(size_t R) {
  std::vector<int32_t> all(R);
  std::iota(all.begin(), all.end(), 0);
  return all;
}

// All of R's keys of `layer` into f.k.
Status ReadAllKeys(PooledReader& reader, const store::LookupResult& m, size_t R, int layer, Fetch& f,
                   IoCounts* io) {
  const std::vector<int32_t> all = AllRows(R);
  f.k.assign(R * reader.geometry().row_bytes, '\0');
  return reader.ReadSelected(m, layer, all, f.k.data(), nullptr, ReadFor::kAhead, io);
}

}  // namespace

std::unique_ptr<SourceState> H2oSource::Start(Request& rq) {
  auto st = std::make_unique<H2oState>(d_.config->n_layers);
  for (int l = 0; l < d_.config->n_layers; ++l) FetchKeys(rq, *st, l);
  return st;
}

StartReads H2oSource::QueryFreeReads() const {
  return {&ReadAllKeys, EntryKind::kRows, d_.reader->geometry().row_bytes};
}

uint64_t H2oSource::IdealBytes(const LayerTrace& trace, uint64_t R) const {
  return (R + trace.rows) * d_.reader->geometry().row_bytes;
}

void H2oSource::FetchKeys(Request& rq, H2oState& st, int layer) const {
  st.key_fetch[layer] = FetchLayer(d_, rq, st, layer, &ReadAllKeys);
}

size_t H2oSource::KeepCount(const Request& rq, int layer) const {
  const bool profiled = d_.row->retention == RetentionFrom::kProfile &&
                        layer < static_cast<int>(rq.layer_retention.size());
  return select::CountForFraction(rq.R, profiled ? rq.layer_retention[layer] : rq.retention);
}

Result<const std::string*> H2oSource::Keys(Request& rq, LayerWork& work, std::string* own) const {
  const int layer = work.view.layer;
  if (const auto& kf = rq.StateAs<H2oState>().key_fetch[layer]) {
    // Requested at the start (H2O always reads all keys; impress when this
    // layer fell back in the previous request).
    RETURN_IF_ERROR(rq.Use(*kf, &work.io_ms));
    return &kf->k;
  }
  const std::vector<int32_t> all = AllRows(rq.R);
  own->assign(rq.R * d_.reader->geometry().row_bytes, '\0');
  RETURN_IF_ERROR(work.Timed([&] {
    return d_.reader->ReadSelected(*rq.m, layer, all, own->data(), nullptr, ReadFor::kDemand, &work.io);
  }));
  return own;
}

Status H2oSource::Select(Request& rq, LayerWork& work, LayerPrefix* prefix,
                         std::vector<int32_t>* selected) const {
  const ModelConfig& c = *d_.config;
  const size_t R = rq.R, rb = d_.reader->geometry().row_bytes;
  const int H = c.n_kv_heads, layer = work.view.layer;
  const size_t hb = static_cast<size_t>(c.head_dim()) * 2;
  std::string own;
  ASSIGN_OR_RETURN(const std::string* kall, Keys(rq, work, &own));
  std::vector<std::vector<float>> scores = AllHeadScores(
      work.view, c, H, reinterpret_cast<const uint16_t*>(kall->data()), static_cast<size_t>(c.kv_dim()), R);
  ForSelection(*d_.options, &scores);
  const size_t k = KeepCount(rq, layer);
  const std::vector<uint32_t>& groups = RowGroups(d_, rq);
  std::vector<std::vector<int32_t>> sets(H);
  std::vector<bool> in_union(R, false);
  for (int h = 0; h < H; ++h) {
    sets[h] = KeepRows(scores[h], groups, k);
    for (int32_t j : sets[h]) in_union[j] = true;
  }
  std::vector<int32_t> uni;
  std::vector<size_t> slot(R, 0);
  for (size_t j = 0; j < R; ++j) {
    if (!in_union[j]) continue;
    slot[j] = uni.size();
    uni.push_back(static_cast<int32_t>(j));
  }
  rq.identify_ms += work.BusyMs();
  std::string vsel(uni.size() * rb, '\0');
  RETURN_IF_ERROR(work.Timed([&] {
    return d_.reader->ReadSelected(*rq.m, layer, uni, nullptr, vsel.data(), ReadFor::kDemand, &work.io);
  }));
  SelectiveLayer& L = rq.layers[layer];
  L.hk.assign(H, {});
  L.hv.assign(H, {});
  L.hpos.assign(H, {});
  prefix->heads.resize(H);
  size_t rows = 0;
  for (int h = 0; h < H; ++h) {
    L.hk[h].resize(sets[h].size() * hb);
    L.hv[h].resize(sets[h].size() * hb);
    for (size_t i = 0; i < sets[h].size(); ++i) {
      const size_t j = static_cast<size_t>(sets[h][i]);
      std::memcpy(L.hk[h].data() + i * hb, kall->data() + j * rb + h * hb, hb);
      std::memcpy(L.hv[h].data() + i * hb, vsel.data() + slot[j] * rb + h * hb, hb);
    }
    L.hpos[h] = sets[h];
    prefix->heads[h] = KvRows{L.hk[h].data(), L.hv[h].data(), KvDType::kF16, sets[h].size(), 0, 0,
                              L.hpos[h].data()};
    rows += sets[h].size();
  }
  work.trace->rows = rows / static_cast<size_t>(H);
  if (d_.row->reports_importance) {
    d_.store->ReportImportance(*rq.m, static_cast<uint16_t>(layer), SumScores(scores, R));
  }
  if (selected) *selected = std::move(uni);
  return Status::Ok();
}

}  // namespace tierkv::engine

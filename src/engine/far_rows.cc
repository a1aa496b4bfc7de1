#include "engine/far_rows.h"

#include <cmath>
#include <cstring>
#include <numeric>

#include "engine/engine_impl.h"

namespace tierkv::engine {

namespace {

// Appends `far`'s rows of `layer` to `prefix` (see AppendFarRows).
Status AppendRows(const ModelConfig& c, const remote::FarRows& far, FarScratch& s, int layer,
                  LayerPrefix* prefix) {
  const size_t H = static_cast<size_t>(c.n_kv_heads), hd = static_cast<size_t>(c.head_dim());
  const size_t kv_dim = static_cast<size_t>(c.kv_dim()), hb = hd * 2;
  const std::vector<int32_t>& fpos = far.positions[layer];
  const size_t nf = fpos.size();
  const char* fk = far.k[layer].data();
  const char* fv = far.v[layer].data();
  if (prefix->heads.empty()) {
    // Nothing local: the far rows as they are (every head strides the rows).
    prefix->heads.resize(H);
    for (size_t h = 0; h < H; ++h) {
      prefix->heads[h] = KvRows{fk + h * hb, fv + h * hb, KvDType::kF16, nf, kv_dim, kv_dim, fpos.data()};
    }
    return Status::Ok();
  }
  if (prefix->heads.size() != H) {
    return Status::InvalidArgument("far rows: the layer's prefix has " + std::to_string(prefix->heads.size()) +
                            " heads, the model " + std::to_string(H));
  }
  s.k.resize(H);
  s.v.resize(H);
  s.pos.resize(H);
  for (size_t h = 0; h < H; ++h) {
    const KvRows& r = prefix->heads[h];
    if (r.count > 0 && r.dtype != KvDType::kF16) return Status::InvalidArgument("far rows: a prefix head not in fp16");
    const size_t ks = r.k_stride ? r.k_stride : hd, vs = r.v_stride ? r.v_stride : hd;
    const size_t n = r.count + nf;
    s.k[h].resize(n * hb);
    s.v[h].resize(n * hb);
    s.pos[h].resize(n);
    for (size_t i = 0; i < r.count; ++i) {
      std::memcpy(s.k[h].data() + i * hb, static_cast<const char*>(r.k) + i * ks * 2, hb);
      std::memcpy(s.v[h].data() + i * hb, static_cast<const char*>(r.v) + i * vs * 2, hb);
      s.pos[h][i] = r.positions ? r.positions[i] : static_cast<int32_t>(i);
    }
    for (size_t i = 0; i < nf; ++i) {
      std::memcpy(s.k[h].data() + (r.count + i) * hb, fk + i * kv_dim * 2 + h * hb, hb);
      std::memcpy(s.v[h].data() + (r.count + i) * hb, fv + i * kv_dim * 2 + h * hb, hb);
      s.pos[h][r.count + i] = fpos[i];
    }
    prefix->heads[h] = KvRows{s.k[h].data(), s.v[h].data(), KvDType::kF16, n, hd, hd, s.pos[h].data()};
  }
  return Status::Ok();
}

}  // namespace

Status AppendFarRows(const ModelConfig& c, Request& rq, int layer, LayerPrefix* prefix) {
  if (rq.far.chunks > 0) return AppendRows(c, rq.far, rq.far_scratch, layer, prefix);
  if (rq.tail.end > rq.tail.start) return AppendRows(c, rq.tail, rq.far_scratch, layer, prefix);
  return Status::Ok();
}

Status ReadTailRows(PooledReader& reader, const store::LookupResult& m, size_t from, size_t to,
                    int n_layers, remote::FarRows* tail, IoCounts* io) {
  const size_t rb = reader.geometry().row_bytes, n = to - from;
  std::vector<int32_t> rows(n);
  std::iota(rows.begin(), rows.end(), static_cast<int32_t>(from));
  remote::FarRows t;
  t.start = from;
  t.end = to;
  t.positions.assign(n_layers, rows);
  t.k.resize(n_layers);
  t.v.resize(n_layers);
  for (int l = 0; l < n_layers; ++l) {
    t.k[l].assign(n * rb, '\0');
    t.v[l].assign(n * rb, '\0');
    RETURN_IF_ERROR(reader.ReadSelected(m, l, rows, t.k[l].data(), t.v[l].data(), ReadFor::kDemand, io));
  }
  t.bytes = 2 * n * rb * static_cast<size_t>(n_layers);
  *tail = std::move(t);
  return Status::Ok();
}

bool Engine::Impl::ReadsImportant(double retention) const {
  return tiers && tiers->has_remote() && row.selective() && opts.remote.read == RemoteRead::kImportant && retention < 1;
}

std::vector<uint32_t> Engine::Impl::ImportantKeep(double retention, const std::vector<double>& layer_retention) const {
  if (!ReadsImportant(retention)) return {};
  std::vector<uint32_t> keep(c.n_layers);
  bool all = true;
  for (int l = 0; l < c.n_layers; ++l) {
    const double r = layer_retention.empty() ? retention : layer_retention[l];
    keep[l] = static_cast<uint32_t>(std::min<double>(opts.chunk_tokens, std::ceil(r * opts.chunk_tokens)));
    if (keep[l] == 0) keep[l] = 1;
    all = all && keep[l] == opts.chunk_tokens;
  }
  if (all) return {};  // every row: whole chunks, kept locally
  return keep;
}

}  // namespace tierkv::engine

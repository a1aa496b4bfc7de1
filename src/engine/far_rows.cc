#include "engine/far_rows.h"

#include <cmath>
#include <cstring>

#include "engine/engine_impl.h"

namespace tierkv::engine {

Status AppendFarRows(const ModelConfig& c, Request& rq, int layer, LayerPrefix* prefix) {
  const remote::FarRows& far = rq.far;
  if (far.chunks == 0) return Status::Ok();
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
  FarScratch& s = rq.far_scratch;
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

bool Engine::Impl::ReadsImportant(double retention) const {
  return remote && row.selective() && opts.remote.read == RemoteRead::kImportant && retention < 1;
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

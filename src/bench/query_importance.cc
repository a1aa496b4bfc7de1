#include "bench/query_importance.h"

#include "select/identify.h"

namespace tierkv::bench {

Result<std::vector<std::vector<std::vector<float>>>> QueryImportance(const Model& model,
                                                                     std::span<const int32_t> prefix,
                                                                     std::span<const int32_t> query) {
  const ModelConfig& c = model.config();
  const size_t np = prefix.size();
  PrefillOptions first;
  first.capture_kv = true;
  first.logits = LogitsMode::kNone;
  ASSIGN_OR_RETURN(PrefillResult pre, model.Prefill(prefix, first));
  PrefillOptions rest;
  rest.start_pos = static_cast<int>(np);
  rest.logits = LogitsMode::kNone;
  rest.column_sums = true;
  rest.before_attention = [&](const LayerView& v, LayerPrefix* out) {
    out->heads.resize(c.n_kv_heads);
    for (int h = 0; h < c.n_kv_heads; ++h) {
      const size_t off = static_cast<size_t>(h) * c.head_dim() * sizeof(float);
      out->heads[h] = KvRows{pre.kv[v.layer].k.data() + off, pre.kv[v.layer].v.data() + off, KvDType::kF32, np,
                             static_cast<size_t>(c.kv_dim()), static_cast<size_t>(c.kv_dim()), nullptr};
    }
    return Status::Ok();
  };
  ASSIGN_OR_RETURN(PrefillResult q, model.Prefill(query, rest));
  std::vector<std::vector<std::vector<float>>> out;
  out.reserve(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) out.push_back(select::KvHeadScores(q.column_sums[l], c.group()));
  return out;
}

}  // namespace tierkv::bench

#include "engine/store_importance.h"

#include <algorithm>
#include <cstring>

#include "engine/head_scores.h"

namespace tierkv::engine {

void StoreImportance::Capture(const LayerView& view) {
  const int w = std::min(kWindow, view.n_new);
  const size_t dim = static_cast<size_t>(c_.dim), kv = static_cast<size_t>(c_.kv_dim());
  window_ = w;
  std::vector<float>& q = q_[view.layer];
  std::vector<float>& k = k_[view.layer];
  q.resize(w * dim);
  k.resize(w * kv);
  for (int i = 0; i < w; ++i) {
    const size_t row = static_cast<size_t>(view.n_new - w + i);
    std::memcpy(q.data() + i * dim, view.q + row * view.q_stride, dim * sizeof(float));
    std::memcpy(k.data() + i * kv, view.k + row * view.kv_stride, kv * sizeof(float));
  }
}

std::vector<std::vector<float>> StoreImportance::Scores(const std::vector<std::string>& kv) const {
  const size_t kvd = static_cast<size_t>(c_.kv_dim());
  std::vector<std::vector<float>> out(c_.n_layers);
  for (int l = 0; l < c_.n_layers; ++l) {
    const size_t n = kv[l].size() / (kvd * 2);  // fp16 rows
    const size_t w = std::min<size_t>(static_cast<size_t>(window_), n);
    const size_t before = n - w;
    std::vector<float>& s = out[l];
    if (before > 0 && q_[l].size() == w * c_.dim) {
      // The window's queries as new tokens (causal among themselves) over
      // the rows before it: the engine's own column sums, every KV head.
      LayerView view;
      view.layer = l;
      view.n_new = static_cast<int>(w);
      view.q = q_[l].data();
      view.q_stride = static_cast<size_t>(c_.dim);
      view.k = view.v = k_[l].data();  // weights only: values are never read
      view.kv_stride = kvd;
      const auto* keys = reinterpret_cast<const uint16_t*>(kv[l].data());
      s = SumScores(AllHeadScores(view, c_, c_.n_kv_heads, keys, kvd, before), before);
    }
    s.resize(n, 0.0f);
    // The window's rows first, in their order (a stable sort keeps it).
    const float top = before > 0 ? *std::max_element(s.begin(), s.begin() + before) : 0.0f;
    for (size_t j = before; j < n; ++j) s[j] = top + 1.0f;
  }
  return out;
}

}  // namespace tierkv::engine

#include "engine/store_importance.h"

#include <algorithm>
#include <cstring>

#include "kernels/attention.h"
#include "util/thread_pool.h"

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
  const int L = c_.n_layers, H = c_.n_kv_heads, hd = c_.head_dim(), group = c_.group();
  const size_t kvd = static_cast<size_t>(c_.kv_dim());
  std::vector<std::vector<float>> out(L);
  for (int l = 0; l < L; ++l) {
    const size_t n = kv[l].size() / (kvd * 2);  // fp16 rows
    const size_t w = std::min<size_t>(static_cast<size_t>(window_), n);
    const size_t before = n - w;
    std::vector<std::vector<float>> per_head(H, std::vector<float>(group * before, 0.0f));
    if (before > 0 && q_[l].size() == w * c_.dim) {
      const auto* keys = reinterpret_cast<const uint16_t*>(kv[l].data());
      ThreadPool::Compute()->ParallelFor(H, [&](int h) {
        thread_local kernels::AttentionScratch scratch;
        kernels::AttentionArgs a;
        a.n_new = static_cast<int>(w);
        a.head_dim = hd;
        a.group = group;
        a.q = q_[l].data() + static_cast<size_t>(h) * group * hd;
        a.q_stride = static_cast<size_t>(c_.dim);
        a.k_new = k_[l].data() + static_cast<size_t>(h) * hd;
        a.v_new = a.k_new;  // weights only: values are never read
        a.kv_new_stride = kvd;
        a.prefix = KvRows{keys + static_cast<size_t>(h) * hd, keys + static_cast<size_t>(h) * hd,
                          KvDType::kF16, before, kvd, kvd, nullptr};
        a.colsum = per_head[h].data();
        kernels::AttendKvGroup(a, &scratch);
      });
    }
    std::vector<float>& s = out[l];
    s.assign(n, 0.0f);
    float top = 0.0f;
    for (size_t j = 0; j < before; ++j) {
      for (int h = 0; h < H; ++h) {
        for (int g = 0; g < group; ++g) s[j] += per_head[h][g * before + j];
      }
      top = std::max(top, s[j]);
    }
    // The window's rows first, in their order (a stable sort keeps it).
    for (size_t j = before; j < n; ++j) s[j] = top + 1.0f;
  }
  return out;
}

}  // namespace tierkv::engine

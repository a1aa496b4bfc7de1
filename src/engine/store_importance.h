// The storing request's importance of the rows it stores (the first write's
// order, docs/systems.md): the attention its last kWindow tokens put on each
// new row, summed over those queries and every head (H2O's column sums over
// an observation window, as SnapKV scores a prompt). Written with the rows,
// it packs a store by importance before any later request reports.
#pragma once

#include <string>
#include <vector>

#include "tierkv/model.h"

namespace tierkv::engine {

class StoreImportance {
 public:
  // The observation window: the prompt's last tokens, whose queries score
  // the rows before them (32 as in SnapKV).
  static constexpr int kWindow = 32;

  explicit StoreImportance(const ModelConfig& c) : c_(c), q_(c.n_layers), k_(c.n_layers) {}

  // In the forward pass's hook, before layer view.layer's attention: keeps
  // the window's queries and keys (fp32, after RoPE).
  void Capture(const LayerView& view);

  // Per layer, one score per row of `keys` (the rows to store, fp16 rows of
  // kv_dim, ending with the window's): rows before the window by the
  // window's causal column sums; the window's own rows rank first (ahead of
  // every scored row, in their order), since they are the ones the window
  // saw last. On the model's compute threads.
  std::vector<std::vector<float>> Scores(const std::vector<std::string>& keys) const;

 private:
  const ModelConfig& c_;
  int window_ = 0;                          // rows captured (the last min(kWindow, n_new))
  std::vector<std::vector<float>> q_, k_;   // per layer: window rows × dim / kv_dim
};

}  // namespace tierkv::engine

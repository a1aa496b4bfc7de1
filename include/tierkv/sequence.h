// A request's K/V kept after its prompt, so that the tokens it generates
// are computed over exactly what the prompt attended: Engine::Serve returns
// one when ServeOptions::keep_kv is set.
//
// Per layer and KV head it holds the reused prefix rows as the request's
// attention read them (all of R for as-like, the selected rows for the
// selective systems: decoding attends the same reduced prefix the prompt
// did) followed by the rows the request computed, in fp16 (the store's
// dtype), with their absolute positions. Step runs one token over them and
// appends its own rows.
//
// Not thread-safe: one owner at a time (a request's decode loop). Memory:
// bytes() (the default model keeps 8 KiB per token at retention 1.0).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tierkv/model.h"
#include "tierkv/status.h"

namespace tierkv {

class Sequence {
 public:
  // An empty sequence for `config`'s shape whose next token sits at
  // `next_position`.
  Sequence(const ModelConfig& config, int next_position);

  // The next token's position (the prompt's length, then one more per Step).
  int position() const { return pos_; }
  // Rows kept for (layer, KV head).
  size_t rows(int layer, int head) const { return Slot(layer, head).pos.size(); }
  uint64_t bytes() const;

  // Runs `token` at position() and returns its next-token logits
  // (vocab_size floats); its K/V are appended. InvalidArgument past the
  // model's context or for a token out of range (the model's checks); the
  // sequence is unchanged on error.
  Result<std::vector<float>> Step(const Model& model, int32_t token);

  // Building one (the engine): copies the rows a layer's attention was
  // given (f16 or f32; f32 is rounded to f16), then the rows the forward
  // pass computed (PrefillResult::kv, f16, positions from `first_position`).
  Status AddPrefix(int layer, const LayerPrefix& prefix);
  Status AddComputed(std::span<const PrefillResult::LayerKv> kv, KvDType dtype, int n_tokens,
                     int first_position);

 private:
  struct Rows {
    std::vector<uint16_t> k, v;  // count × head_dim, fp16
    std::vector<int32_t> pos;
  };
  Rows& Slot(int layer, int head) { return slots_[static_cast<size_t>(layer) * heads_ + head]; }
  const Rows& Slot(int layer, int head) const { return slots_[static_cast<size_t>(layer) * heads_ + head]; }

  int layers_, heads_, head_dim_;
  int pos_;
  std::vector<Rows> slots_;  // layer-major
};

}  // namespace tierkv

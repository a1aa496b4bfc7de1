// A sequence's K/V cache: per layer and KV head, the rows the next token
// attends, with their absolute positions, and the step that runs tokens
// over them and appends their own rows. Generate decodes with one; the
// engine returns one after a prompt (ServeOptions::keep_kv) holding the
// reused prefix rows as the request's attention read them (all of R for
// as-like, the selected rows for the selective systems: decoding attends
// the same reduced prefix the prompt did) followed by the rows the request
// computed, in the store's fp16.
//
// Not thread-safe: one owner at a time (a request's decode loop). Memory:
// bytes() (the default model keeps 8 KiB per token in fp16).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tierkv/model.h"
#include "tierkv/status.h"

namespace tierkv {

class Sequence {
 public:
  // An empty sequence for `config`'s shape, rows kept as `dtype`, whose
  // next token sits at `next_position`.
  Sequence(const ModelConfig& config, int next_position, KvDType dtype = KvDType::kF16);

  // The next token's position (the prompt's length, then one more per token run).
  int position() const { return pos_; }
  KvDType dtype() const { return dtype_; }
  // Rows kept for (layer, KV head).
  size_t rows(int layer, int head) const { return Slot(layer, head).pos.size(); }
  uint64_t bytes() const;
  // Room for `rows` rows in every (layer, head), so that appending does not move them.
  void Reserve(size_t rows);

  // Runs `tokens` from position() over the rows kept and returns the last
  // one's next-token logits (vocab_size floats); their K/V are appended.
  // InvalidArgument past the model's context or for a token out of range
  // (the model's checks); the sequence is unchanged on error.
  Result<std::vector<float>> Step(const Model& model, std::span<const int32_t> tokens);
  Result<std::vector<float>> Step(const Model& model, int32_t token) {
    return Step(model, std::span(&token, 1));
  }
  // One token for each of `seqs` (distinct sequences), in one batched pass
  // (Model::PrefillBatch): each one's next-token logits, in order, as Step
  // gives them to rounding. On an error in the pass every sequence is
  // unchanged.
  static Result<std::vector<std::vector<float>>> StepBatch(const Model& model,
                                                           std::span<Sequence* const> seqs,
                                                           std::span<const int32_t> tokens);

  // Building one (the engine): copies the rows a layer's attention was
  // given (converted to dtype() if need be), then the rows a forward pass
  // computed (PrefillResult::kv, positions from `first_position`).
  Status AddPrefix(int layer, const LayerPrefix& prefix);
  Status AddComputed(std::span<const PrefillResult::LayerKv> kv, KvDType dtype, int n_tokens,
                     int first_position);

 private:
  // A step's options: from position(), K/V captured as dtype(), the last
  // logits, the rows kept as every layer's prefix.
  PrefillOptions StepOptions() const;
  struct Rows {
    std::vector<uint8_t> k, v;  // count × head_dim elements of dtype_
    std::vector<int32_t> pos;
  };
  Rows& Slot(int layer, int head) { return slots_[static_cast<size_t>(layer) * heads_ + head]; }
  const Rows& Slot(int layer, int head) const { return slots_[static_cast<size_t>(layer) * heads_ + head]; }

  int layers_, heads_, head_dim_;
  int pos_;
  KvDType dtype_;
  std::vector<Rows> slots_;  // layer-major
};

}  // namespace tierkv

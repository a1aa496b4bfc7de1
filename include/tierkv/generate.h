// Text generation over the KV hooks: prefill the prompt, then decode one token
// at a time with the earlier tokens' K and V supplied as prefix rows.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tierkv/model.h"
#include "tierkv/tokenizer.h"

namespace tierkv {

struct SamplerOptions {
  float temperature = 0.0f;  // 0: greedy (argmax)
  float top_p = 1.0f;        // nucleus sampling mass, in (0, 1]
  uint64_t seed = 0;
};

// Picks a token from logits. Not thread-safe (holds the random state).
class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);
  int32_t Sample(std::span<const float> logits);

 private:
  SamplerOptions opt_;
  uint64_t state_;
  std::vector<std::pair<float, int32_t>> probs_;
};

struct GenerateOptions {
  int max_tokens = 64;
  SamplerOptions sampler;
  KvDType kv_dtype = KvDType::kF32;
  bool stop_at_eos = true;  // also stops at BOS, which delimits llama2.c stories
  // Called with each new token's text as soon as it is known.
  std::function<void(std::string_view)> on_text;
};

struct GenerateResult {
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> output_tokens;
  std::string text;
  double prefill_ms = 0;
  double decode_ms = 0;
  bool hit_context_limit = false;
};

Status ValidateGenerateOptions(const GenerateOptions& options);

// Errors: InvalidArgument when the prompt does not fit the context or the
// options are out of range.
Result<GenerateResult> Generate(const Model& model, const Tokenizer& tokenizer,
                                std::string_view prompt, const GenerateOptions& options);
// The same from the prompt's tokens as given (a rendered chat, say).
Result<GenerateResult> Generate(const Model& model, const Tokenizer& tokenizer,
                                std::vector<int32_t> prompt_tokens, const GenerateOptions& options);

// The decoding half of Generate, over any way of running one token: from
// `logits` (the prompt's last), samples, stops at EOS/BOS, max_tokens or
// the context, and calls `step` with each chosen token for the next
// logits. Fills res->output_tokens, text, decode_ms, hit_context_limit;
// res->prompt_tokens must hold the prompt (its length is the first
// generated token's position). Errors: options out of range, or step's.
using StepFn = std::function<Result<std::vector<float>>(int32_t token)>;
Status Continue(const Tokenizer& tokenizer, int context_length, std::vector<float> logits,
                const StepFn& step, const GenerateOptions& options, GenerateResult* res);

}  // namespace tierkv

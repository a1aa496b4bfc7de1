#include "tierkv/generate.h"

#include "tierkv/elapsed.h"
#include "tierkv/sequence.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

namespace tierkv {
namespace {

// splitmix64: small, seedable, and identical on every platform.
uint64_t NextRandom(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

Sampler::Sampler(const SamplerOptions& options) : opt_(options), state_(options.seed) {}

// Sampling never sorts the vocabulary (128 k entries on Llama 3: a full
// sort cost more than a Q4_K decode step's products): top_p = 1 draws over
// the ids in id order (the same distribution as before, but a given seed
// now picks another token than releases that sorted first); top_p < 1 ranks
// only the largest k probabilities (nth_element, then a sort of those k), k
// growing 8-fold until their mass reaches top_p: the nucleus and the draw
// are those of a full sort.
int32_t Sampler::Sample(std::span<const float> logits) {
  const int n = static_cast<int>(logits.size());
  if (opt_.temperature <= 0.0f) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  const float mx = *std::max_element(logits.begin(), logits.end());
  probs_.resize(n);
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const float p = std::exp((logits[i] - mx) / opt_.temperature);
    probs_[i] = {p, i};
    sum += p;
  }
  const double r = (NextRandom(&state_) >> 11) * (1.0 / 9007199254740992.0);
  // The id whose share of the first `count` entries' mass (`total`) holds r.
  const auto draw = [&](int count, double total) {
    const double u = r * total;
    double acc = 0;
    for (int i = 0; i < count; ++i) {
      acc += probs_[i].first;
      if (u < acc) return probs_[i].second;
    }
    return probs_[count - 1].second;
  };
  if (opt_.top_p >= 1.0f) return draw(n, sum);
  const auto greater = [](const auto& a, const auto& b) { return a.first > b.first; };
  // Keep the smallest prefix (by probability) whose mass reaches top_p.
  int keep = n;
  for (int k = std::min(n, 256);; k = std::min(n, k * 8)) {
    std::nth_element(probs_.begin(), probs_.begin() + (k - 1), probs_.end(), greater);
    std::sort(probs_.begin(), probs_.begin() + k, greater);
    double mass = 0;
    for (int i = 0; i < k; ++i) {
      mass += probs_[i].first / sum;
      if (mass >= opt_.top_p) {
        keep = i + 1;
        break;
      }
    }
    if (keep < n || k == n) break;
  }
  double kept = 0;
  for (int i = 0; i < keep; ++i) kept += probs_[i].first;
  return draw(keep, kept);
}

Status ValidateGenerateOptions(const GenerateOptions& o) {
  if (o.max_tokens < 0) return Status::InvalidArgument("max_tokens must be >= 0");
  if (!std::isfinite(o.sampler.temperature) || o.sampler.temperature < 0.0f) {
    return Status::InvalidArgument("temperature must be a finite number >= 0");
  }
  if (!(o.sampler.top_p > 0.0f && o.sampler.top_p <= 1.0f)) {
    return Status::InvalidArgument("top_p must be in (0, 1]");
  }
  return Status::Ok();
}

Result<GenerateResult> Generate(const Model& model, const Tokenizer& tok, std::string_view prompt,
                                const GenerateOptions& opt) {
  RETURN_IF_ERROR(ValidateGenerateOptions(opt));
  ASSIGN_OR_RETURN(std::vector<int32_t> tokens, tok.Encode(prompt, /*add_bos=*/true));
  return Generate(model, tok, std::move(tokens), opt);
}

Result<GenerateResult> Generate(const Model& model, const Tokenizer& tok, std::vector<int32_t> prompt_tokens,
                                const GenerateOptions& opt) {
  RETURN_IF_ERROR(ValidateGenerateOptions(opt));
  const ModelConfig& c = model.config();
  GenerateResult res;
  res.prompt_tokens = std::move(prompt_tokens);
  if (res.prompt_tokens.empty()) return Status::InvalidArgument("the prompt has no tokens");
  const int n_prompt = static_cast<int>(res.prompt_tokens.size());
  if (n_prompt > c.context_length) {
    return Status::InvalidArgument("the prompt has " + std::to_string(n_prompt) +
                                   " tokens but the model's context is " +
                                   std::to_string(c.context_length) + " tokens");
  }

  // The KV cache, with room for every row it can hold (int64: max_tokens
  // may be as large as INT_MAX).
  Sequence seq(c, 0, opt.kv_dtype);
  seq.Reserve(static_cast<size_t>(std::min<int64_t>(c.context_length, int64_t{n_prompt} + opt.max_tokens)));
  auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::vector<float> logits, seq.Step(model, res.prompt_tokens));
  res.prefill_ms = MsSince(t0);
  const auto step = [&](int32_t next) { return seq.Step(model, next); };
  RETURN_IF_ERROR(Continue(tok, c.context_length, std::move(logits), step, opt, &res));
  return res;
}

Status Continue(const Tokenizer& tok, int context_length, std::vector<float> logits,
                const StepFn& step, const GenerateOptions& opt, GenerateResult* res) {
  RETURN_IF_ERROR(ValidateGenerateOptions(opt));
  if (res->prompt_tokens.empty()) return Status::InvalidArgument("continue: no prompt tokens");
  Sampler sampler(opt.sampler);
  const auto t0 = std::chrono::steady_clock::now();
  int32_t prev = res->prompt_tokens.back();
  int64_t pos = static_cast<int64_t>(res->prompt_tokens.size());
  for (int step_i = 0; step_i < opt.max_tokens; ++step_i) {
    const int32_t next = sampler.Sample(logits);
    if (opt.stop_at_eos && (next == tok.eos_id() || next == tok.bos_id())) break;
    res->output_tokens.push_back(next);
    std::string piece = tok.DecodePiece(prev, next);
    res->text += piece;
    if (opt.on_text) opt.on_text(piece);
    prev = next;
    if (step_i + 1 == opt.max_tokens) break;
    if (pos >= context_length) {
      res->hit_context_limit = true;
      break;
    }
    ASSIGN_OR_RETURN(logits, step(next));
    ++pos;
  }
  res->decode_ms = MsSince(t0);
  return Status::Ok();
}


}  // namespace tierkv

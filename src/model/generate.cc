#include "tierkv/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

namespace tierkv {
namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// splitmix64: small, seedable, and identical on every platform.
uint64_t NextRandom(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

Sampler::Sampler(const SamplerOptions& options) : opt_(options), state_(options.seed) {}

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
  std::sort(probs_.begin(), probs_.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  // Keep the smallest prefix whose mass reaches top_p.
  int keep = n;
  double mass = 0;
  for (int i = 0; i < n; ++i) {
    mass += probs_[i].first / sum;
    if (mass >= opt_.top_p) {
      keep = i + 1;
      break;
    }
  }
  double kept = 0;
  for (int i = 0; i < keep; ++i) kept += probs_[i].first;
  const double u = (NextRandom(&state_) >> 11) * (1.0 / 9007199254740992.0) * kept;
  double acc = 0;
  for (int i = 0; i < keep; ++i) {
    acc += probs_[i].first;
    if (u < acc) return probs_[i].second;
  }
  return probs_[keep - 1].second;
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
  const ModelConfig& c = model.config();
  GenerateResult res;
  ASSIGN_OR_RETURN(res.prompt_tokens, tok.Encode(prompt, /*add_bos=*/true));
  const int n_prompt = static_cast<int>(res.prompt_tokens.size());
  if (n_prompt > c.context_length) {
    return Status::InvalidArgument("the prompt has " + std::to_string(n_prompt) +
                                   " tokens but the model's context is " +
                                   std::to_string(c.context_length) + " tokens");
  }

  // The KV cache: per layer, rows of kv_dim elements at positions 0..pos-1.
  const size_t es = KvDTypeSize(opt.kv_dtype);
  const size_t row_bytes = static_cast<size_t>(c.kv_dim()) * es;
  std::vector<std::vector<uint8_t>> kcache(c.n_layers), vcache(c.n_layers);
  int pos = 0;
  auto append = [&](const PrefillResult& r) {
    for (int l = 0; l < c.n_layers; ++l) {
      kcache[l].insert(kcache[l].end(), r.kv[l].k.begin(), r.kv[l].k.end());
      vcache[l].insert(vcache[l].end(), r.kv[l].v.begin(), r.kv[l].v.end());
    }
    pos += r.n_tokens;
  };
  PrefillOptions po;
  po.capture_kv = true;
  po.kv_dtype = opt.kv_dtype;
  po.before_attention = [&](const LayerView& view, LayerPrefix* prefix) -> Status {
    if (pos == 0) return Status::Ok();
    prefix->heads.resize(c.n_kv_heads);
    for (int h = 0; h < c.n_kv_heads; ++h) {
      KvRows& r = prefix->heads[h];
      r.dtype = opt.kv_dtype;
      r.count = static_cast<size_t>(pos);
      r.k = kcache[view.layer].data() + static_cast<size_t>(h) * c.head_dim() * es;
      r.v = vcache[view.layer].data() + static_cast<size_t>(h) * c.head_dim() * es;
      r.k_stride = r.v_stride = static_cast<size_t>(c.kv_dim());
    }
    return Status::Ok();
  };
  // int64: max_tokens may be as large as INT_MAX.
  const int64_t rows = std::min<int64_t>(c.context_length, int64_t{n_prompt} + opt.max_tokens);
  for (int l = 0; l < c.n_layers; ++l) {
    kcache[l].reserve(row_bytes * static_cast<size_t>(rows));
    vcache[l].reserve(kcache[l].capacity());
  }

  auto t0 = std::chrono::steady_clock::now();
  po.start_pos = 0;
  ASSIGN_OR_RETURN(PrefillResult r, model.Prefill(res.prompt_tokens, po));
  append(r);
  res.prefill_ms = MsSince(t0);

  const auto step = [&](int32_t next) -> Result<std::vector<float>> {
    po.start_pos = pos;
    ASSIGN_OR_RETURN(PrefillResult d, model.Prefill(std::span(&next, 1), po));
    append(d);
    return std::move(d.logits);
  };
  RETURN_IF_ERROR(Continue(tok, c.context_length, std::move(r.logits), step, opt, &res));
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

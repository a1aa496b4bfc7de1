#include <cmath>

#include "tierkv/eval.h"

namespace tierkv {

Result<PerplexityResult> EvaluatePerplexity(const Model& model, std::span<const int32_t> tokens,
                                            int window,
                                            const std::function<void(int, int)>& progress) {
  const ModelConfig& c = model.config();
  if (window < 2 || window > c.context_length) {
    return Status::InvalidArgument("window must be in [2, " + std::to_string(c.context_length) +
                                   "], got " + std::to_string(window));
  }
  if (tokens.size() < 2) return Status::InvalidArgument("need at least 2 tokens to score");
  const size_t n = tokens.size();
  const int total = static_cast<int>((n + window - 1) / window);
  PerplexityResult r;
  double nll = 0;
  for (size_t start = 0; start < n; start += window) {
    const size_t len = std::min<size_t>(window, n - start);
    if (len < 2) break;
    PrefillOptions o;
    o.logits = LogitsMode::kAll;
    ASSIGN_OR_RETURN(PrefillResult res, model.Prefill(tokens.subspan(start, len), o));
    const size_t V = c.vocab_size;
    for (size_t i = 0; i + 1 < len; ++i) {
      const float* l = res.logits.data() + i * V;
      float mx = l[0];
      for (size_t v = 1; v < V; ++v) mx = std::max(mx, l[v]);
      double sum = 0;
      for (size_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(l[v]) - mx);
      nll += (mx + std::log(sum)) - l[tokens[start + i + 1]];
      ++r.tokens_scored;
    }
    ++r.windows;
    if (progress) progress(r.windows, total);
  }
  r.mean_nll = nll / static_cast<double>(r.tokens_scored);
  r.perplexity = std::exp(r.mean_nll);
  return r;
}

}  // namespace tierkv

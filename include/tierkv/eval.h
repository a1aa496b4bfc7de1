// Perplexity of a model on a token stream.
//
// The stream is cut into consecutive windows of `window` tokens; each window
// is one prefill from position 0 and predicts its own tokens 1..window-1 from
// the tokens before them in the window (the first token of a window is not
// scored). A final shorter window is evaluated the same way if it has at
// least 2 tokens. tools/train computes the same quantity in PyTorch.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "tierkv/model.h"

namespace tierkv {

struct PerplexityResult {
  int64_t tokens_scored = 0;
  int windows = 0;
  double mean_nll = 0;  // nats per scored token
  double perplexity = 0;
};

// progress(done_windows, total_windows) after each window (may be empty).
// Errors: InvalidArgument if window < 2 or exceeds the context, or the stream
// has fewer than 2 tokens.
Result<PerplexityResult> EvaluatePerplexity(const Model& model, std::span<const int32_t> tokens,
                                            int window,
                                            const std::function<void(int, int)>& progress = {});

}  // namespace tierkv

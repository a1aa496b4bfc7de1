// How far a system's next-token distributions are from a reference's
// (`recompute`): the largest logit difference, top-1 agreement and the mean
// KL divergence KL(reference || system), over rows of `vocab` logits.
#pragma once

#include <cstddef>
#include <span>

namespace tierkv::engine {

// log(sum(exp(row))), computed stably in double: log-probabilities are
// row[i] - LogSumExp(row).
double LogSumExp(std::span<const float> row);

struct Fidelity {
  size_t rows = 0;
  double max_abs_logit_diff = 0;
  size_t top1_agree_rows = 0;
  double kl_sum = 0;
  double top1_agree() const { return rows ? static_cast<double>(top1_agree_rows) / rows : 1.0; }
  double kl_mean() const { return rows ? kl_sum / static_cast<double>(rows) : 0.0; }
  // Adds rows of logits (row-major, `vocab` each; equal sizes).
  void Add(std::span<const float> reference, std::span<const float> system, size_t vocab);
};

}  // namespace tierkv::engine

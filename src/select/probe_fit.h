// A probe threshold fitted to the model (`--alpha auto`). IMPRESS's rule
// (the probes decide a layer when their mean pairwise Jaccard J reaches
// j^alpha) was fitted to OPT and Llama-2 with alpha 0.6; other models'
// heads agree more or less. Instead, profiling prompts measure per layer,
// for each prompt, J and the recall of the probes' shared set against
// H2O's per-head selection: per KV head, the share of the attention mass
// of that head's best set of the same size that the shared set holds,
// averaged over the heads (HeadMassRecall). The fitted threshold keeps the
// samples the probes decide at a mean recall of at least the target.
#pragma once

#include <cstddef>
#include <limits>
#include <span>
#include <vector>

#include "tierkv/status.h"

namespace tierkv::select {

struct ProbeSample {
  double jaccard = 0;  // the probes' mean pairwise Jaccard
  double recall = 0;   // of their shared set (HeadMassRecall)
};

// Never use the probes: the layer reads all keys.
inline constexpr double kNeverProbes = std::numeric_limits<double>::infinity();

// One layer's Jaccard threshold: 0 (the probes always decide) when the
// mean recall of all its samples reaches `target`; else the lowest J of the
// largest set of highest-J samples whose mean recall reaches it; else
// kNeverProbes (no samples, or not even the best-agreeing sample reaches it).
double FitThreshold(std::vector<ProbeSample> samples, double target);

// Recall of a set by importance mass: the all-heads importance (`scores`,
// summed over every KV head) the set holds, as a share of what the best k
// rows by that importance hold (H2O's shared set of all heads). A set that
// misses only marginal rows keeps most of the attention mass.
double MassRecall(std::span<const int32_t> set, std::span<const float> scores, size_t k);

// Recall of one shared set against each head's own best set (H2O's per-head
// selection, what as-h2o serves): per KV head, the importance the set holds
// as a share of what that head's best k rows hold, averaged over the heads.
// A set that suits the heads' sum but misses what single heads attend to
// scores lower here than by MassRecall.
double HeadMassRecall(std::span<const int32_t> set, const std::vector<std::vector<float>>& head_scores,
                      size_t k);

}  // namespace tierkv::select

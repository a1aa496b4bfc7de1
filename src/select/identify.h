// Important-token identification (IMPRESS 4.3) and its baselines.
//
// A layer's prefix rows are ranked by H2O importance: the softmax weight the
// new tokens' queries put on each row, summed over those queries (the
// engine's column sums; a KV head's importance sums its query heads, so GQA
// models work per KV head). IMPRESS computes it for a few probe heads only
// (their keys are stored apart, so this reads ~3/16 of the keys), takes each
// probe head's top-k, and measures how much the probe heads agree (mean
// pairwise Jaccard J). Heads of a layer that agree with each other are
// representative of the layer: if J >= t = j^alpha, where j = f / (2 - f) is
// the Jaccard of random sets of the same size (f = k / n), the layer's set
// is taken from the probes; otherwise the layer falls back to all heads' keys.
//
// Aggregation of the probe heads' evidence: the summed score (default) or a
// vote. Summing keeps magnitudes: with 3 probes a vote has only 4 levels and
// its ties must be broken by the scores anyway, and a row one head ranks
// first and another just outside its top-k should beat a row that one head
// barely includes. Both are offered so the choice can be measured.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tierkv/status.h"

namespace tierkv::select {

enum class Aggregation { kSum, kVote };
std::string_view AggregationName(Aggregation a);
Result<Aggregation> ParseAggregation(std::string_view name);

struct IdentifyOptions {
  double retention = 0.25;  // share of a layer's prefix rows to select, (0, 1]
  double alpha = 0.6;       // the threshold exponent: t = j^alpha
  Aggregation aggregation = Aggregation::kSum;
  // InvalidArgument naming the bad field.
  Status Validate() const;
};

// scores[h][j] = importance of prefix row j for KV head h: the query heads'
// column sums of each GQA group added up. query_head_sums[q][j] per query
// head; group = query heads per KV head.
std::vector<std::vector<float>> KvHeadScores(const std::vector<std::vector<float>>& query_head_sums,
                                             int group);

// Top-k of the element-wise sum of the heads' scores (ascending indices;
// ties by lower index). The all-heads fallback, and H2O's shared set.
std::vector<int32_t> SelectBySummedScores(const std::vector<std::vector<float>>& head_scores,
                                          size_t k);

// Rows ranked by how many heads' top-k sets hold them, ties by summed score
// then lower index; the first k, ascending.
std::vector<int32_t> SelectByVote(const std::vector<std::vector<float>>& head_scores, size_t k);

// IMPRESS 4.3 identifies with a few probe heads: a layer's first KV heads
// (the store keeps their keys once more, so that identification reads
// little). ProbeHeads: how many a model with `kv_heads` KV heads has.
inline constexpr int kProbeHeads = 3;
inline int ProbeHeads(int kv_heads) { return kv_heads < kProbeHeads ? kv_heads : kProbeHeads; }

// The probe decision of one layer.
struct ProbeDecision {
  size_t n = 0;                // prefix rows
  size_t k = 0;                // rows to select: CountForFraction(n, retention)
  // Each probe head's top-k, and their mean pairwise Jaccard; neither is
  // computed (empty, NaN) when the threshold is 0: every Jaccard meets it.
  std::vector<std::vector<int32_t>> probe_sets;
  double jaccard = 0;
  double random_jaccard = 0;   // j = (k/n) / (2 - k/n)
  double threshold = 0;        // t = j^alpha
  bool use_probes = false;     // jaccard >= threshold
  // When use_probes: the probes' aggregated top-k (ascending), or whole
  // groups of rows (`groups`) by summed score. Empty otherwise: the caller
  // computes all heads' scores and uses SelectBySummedScores (the per-layer
  // fallback).
  std::vector<int32_t> selected;
  // When use_probes: the probe heads' summed scores per row (what
  // reordering packs by).
  std::vector<float> summed;
};

// probe_scores[p][j]: importance of row j for probe head p (every vector the
// same length n). With one probe head there is nothing to compare: J = 1.
// fitted_threshold >= 0: that threshold instead of j^alpha (a fitted
// profile's, select/probe_fit.h; kNeverProbes: always fall back). groups
// non-empty: the shared set is taken in whole groups of rows by the probes'
// summed scores (TopGroups; the decision itself stays per row, and a vote
// has no meaning for groups).
ProbeDecision DecideWithProbes(const std::vector<std::vector<float>>& probe_scores,
                               const IdentifyOptions& options, double fitted_threshold = -1,
                               std::span<const uint32_t> groups = {});

// SPEC's speculation: layer l+1's set is predicted to be layer l's. Recall of
// a prediction: |predicted ∩ actual| / |actual| (1 when actual is empty).
double Recall(std::span<const int32_t> predicted, std::span<const int32_t> actual);

}  // namespace tierkv::select

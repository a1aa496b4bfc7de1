#include "select/identify.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "select/importance.h"

namespace tierkv::select {

std::string_view AggregationName(Aggregation a) { return a == Aggregation::kSum ? "sum" : "vote"; }

Result<Aggregation> ParseAggregation(std::string_view name) {
  if (name == "sum") return Aggregation::kSum;
  if (name == "vote") return Aggregation::kVote;
  return Status::InvalidArgument("aggregation '" + std::string(name) + "': expected sum or vote");
}

Status IdentifyOptions::Validate() const {
  if (!(retention > 0 && retention <= 1)) {
    return Status::InvalidArgument("retention " + std::to_string(retention) + " is outside (0, 1]");
  }
  if (!(alpha >= 0 && std::isfinite(alpha))) {
    return Status::InvalidArgument("alpha " + std::to_string(alpha) + " must be a finite number >= 0");
  }
  return Status::Ok();
}

std::vector<std::vector<float>> KvHeadScores(const std::vector<std::vector<float>>& query_head_sums,
                                             int group) {
  std::vector<std::vector<float>> out;
  if (group < 1) return out;
  for (size_t q = 0; q < query_head_sums.size(); ++q) {
    if (q % static_cast<size_t>(group) == 0) {
      out.push_back(query_head_sums[q]);
    } else {
      auto& acc = out.back();
      for (size_t j = 0; j < acc.size(); ++j) acc[j] += query_head_sums[q][j];
    }
  }
  return out;
}

namespace {

std::vector<float> Summed(const std::vector<std::vector<float>>& head_scores) {
  std::vector<float> sum(head_scores.empty() ? 0 : head_scores[0].size(), 0.0f);
  for (const auto& h : head_scores) {
    for (size_t j = 0; j < sum.size(); ++j) sum[j] += h[j];
  }
  return sum;
}

}  // namespace

std::vector<int32_t> SelectBySummedScores(const std::vector<std::vector<float>>& head_scores,
                                          size_t k) {
  const std::vector<float> sum = Summed(head_scores);
  return TopK(sum, k);
}

std::vector<int32_t> SelectByVote(const std::vector<std::vector<float>>& head_scores, size_t k) {
  const std::vector<float> sum = Summed(head_scores);
  std::vector<int> votes(sum.size(), 0);
  for (const auto& h : head_scores) {
    for (int32_t j : TopK(h, k)) ++votes[j];
  }
  std::vector<int32_t> idx(sum.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min(k, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + static_cast<ptrdiff_t>(k), idx.end(),
                    [&](int32_t a, int32_t b) {
                      if (votes[a] != votes[b]) return votes[a] > votes[b];
                      if (sum[a] != sum[b]) return sum[a] > sum[b];
                      return a < b;
                    });
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

ProbeDecision DecideWithProbes(const std::vector<std::vector<float>>& probe_scores,
                               const IdentifyOptions& o, double fitted_threshold,
                               std::span<const uint32_t> groups) {
  ProbeDecision d;
  d.n = probe_scores.empty() ? 0 : probe_scores[0].size();
  if (d.n == 0) {
    d.use_probes = true;  // nothing to select
    return d;
  }
  d.k = CountForFraction(d.n, o.retention);
  const double f = static_cast<double>(d.k) / static_cast<double>(d.n);
  d.random_jaccard = RandomJaccard(f);
  d.threshold = fitted_threshold >= 0 ? fitted_threshold : std::pow(d.random_jaccard, o.alpha);
  if (d.threshold <= 0) {
    // A fitted profile's usual answer: the probes decide whatever they
    // agree on, so their top-k sets (a third of the decision's time) are
    // not needed.
    d.jaccard = std::numeric_limits<double>::quiet_NaN();
    d.use_probes = true;
  } else {
    for (const auto& s : probe_scores) d.probe_sets.push_back(TopK(s, d.k));
    d.jaccard = MeanPairwiseJaccard(d.probe_sets);
    d.use_probes = d.jaccard >= d.threshold;
  }
  if (d.use_probes) {
    d.summed = Summed(probe_scores);
    if (!groups.empty()) {
      d.selected = TopGroups(d.summed, groups, d.k);
    } else {
      d.selected = o.aggregation == Aggregation::kSum ? TopK(d.summed, d.k) : SelectByVote(probe_scores, d.k);
    }
  }
  return d;
}

double Recall(std::span<const int32_t> predicted, std::span<const int32_t> actual) {
  if (actual.empty()) return 1.0;
  return static_cast<double>(IntersectionSize(predicted, actual)) /
         static_cast<double>(actual.size());
}

}  // namespace tierkv::select

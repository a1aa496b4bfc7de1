#include "select/probe_fit.h"

#include <algorithm>

#include "select/importance.h"

namespace tierkv::select {

double FitThreshold(std::vector<ProbeSample> samples, double target) {
  if (samples.empty()) return kNeverProbes;
  std::sort(samples.begin(), samples.end(),
            [](const ProbeSample& a, const ProbeSample& b) { return a.jaccard > b.jaccard; });
  double sum = 0;
  size_t best = 0;  // the most highest-J samples whose mean recall reaches the target
  for (size_t i = 0; i < samples.size(); ++i) {
    sum += samples[i].recall;
    if (sum / static_cast<double>(i + 1) >= target) best = i + 1;
  }
  if (best == samples.size()) return 0.0;
  if (best == 0) return kNeverProbes;
  return samples[best - 1].jaccard;
}

double MassRecall(std::span<const int32_t> set, std::span<const float> scores, size_t k) {
  double best = 0, got = 0;
  for (int32_t j : TopK(scores, k)) best += scores[j];
  for (int32_t j : set) got += scores[j];
  return best > 0 ? std::min(1.0, got / best) : 1.0;
}

double HeadMassRecall(std::span<const int32_t> set, const std::vector<std::vector<float>>& head_scores,
                      size_t k) {
  if (head_scores.empty()) return 1.0;
  double sum = 0;
  for (const auto& s : head_scores) sum += MassRecall(set, s, k);
  return sum / static_cast<double>(head_scores.size());
}

}  // namespace tierkv::select

#include "tierkv/fidelity.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tierkv::engine {

double LogSumExp(std::span<const float> x) {
  const double mx = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (float v : x) sum += std::exp(double(v) - mx);
  return mx + std::log(sum);
}

namespace {

// log-softmax of one row, in double.
void LogSoftmax(std::span<const float> x, std::vector<double>* out) {
  out->resize(x.size());
  const double lse = LogSumExp(x);
  for (size_t i = 0; i < x.size(); ++i) (*out)[i] = double(x[i]) - lse;
}

}  // namespace

void Fidelity::Add(std::span<const float> reference, std::span<const float> system, size_t vocab) {
  if (vocab == 0) return;
  const size_t n = std::min(reference.size(), system.size()) / vocab;
  std::vector<double> lp, lq;
  for (size_t r = 0; r < n; ++r) {
    const auto a = reference.subspan(r * vocab, vocab), b = system.subspan(r * vocab, vocab);
    for (size_t i = 0; i < vocab; ++i) {
      max_abs_logit_diff = std::max(max_abs_logit_diff, std::fabs(double(a[i]) - b[i]));
    }
    // Ties go to the lower id, as greedy decoding does.
    const size_t ta = std::max_element(a.begin(), a.end()) - a.begin();
    const size_t tb = std::max_element(b.begin(), b.end()) - b.begin();
    top1_agree_rows += ta == tb;
    LogSoftmax(a, &lp);
    LogSoftmax(b, &lq);
    double kl = 0;
    for (size_t i = 0; i < vocab; ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
    kl_sum += std::max(0.0, kl);
    ++rows;
  }
}

}  // namespace tierkv::engine

#include "tierkv/tools/latency.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tierkv::bench {

namespace {

// `sorted` ascending, not empty.
double NearestRank(const std::vector<double>& sorted, double p) {
  const double rank = std::ceil(p * static_cast<double>(sorted.size()));
  const size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return sorted[std::min(sorted.size() - 1, i)];
}

}  // namespace

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return NearestRank(v, p);
}

LatencySummary Summarize(std::vector<double> v) {
  LatencySummary s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  s.p50 = NearestRank(v, 0.5);
  s.p90 = NearestRank(v, 0.9);
  s.p99 = NearestRank(v, 0.99);
  s.max = v.back();
  return s;
}

}  // namespace tierkv::bench

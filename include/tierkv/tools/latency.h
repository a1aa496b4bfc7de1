// Latency summaries for the benchmark reports (compare, bench-serve): one
// definition of a percentile, the nearest rank (the smallest sample with at
// least p of the samples at or below it).
#pragma once

#include <cstddef>
#include <vector>

namespace tierkv::bench {

// The nearest-rank p-quantile of `v` (0 when empty); p in (0, 1].
double Percentile(std::vector<double> v, double p);

struct LatencySummary {
  size_t n = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};
LatencySummary Summarize(std::vector<double> v);

}  // namespace tierkv::bench

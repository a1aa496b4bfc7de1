// Cache-policy simulation on a synthetic trace (IMPRESS Figure 5(b)'s case):
// chunk popularity follows a Zipf law, each chunk's share of important rows
// is independent of its popularity. Every policy replays the same trace on a
// TieredCache of the same size; the measure is the share of requested
// important rows that were already on the device.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tierkv/status.h"

namespace tierkv::sim {

struct PolicyTraceOptions {
  int chunks = 2000;
  int accesses = 200000;
  double zipf_s = 1.0;           // popularity of the r-th chunk ~ 1 / r^s
  double device_fraction = 0.05; // device pool, in chunks, as a share of all chunks
  double host_fraction = 0.15;
  uint32_t rows = 64;            // rows (tokens) per chunk
  double min_ratio = 0.05;       // important-row ratios are uniform in [min_ratio, 1]
  double ratio_noise = 0.05;     // per-access jitter of a chunk's ratio
  double warmup_fraction = 0.1;  // accesses not counted
  uint64_t seed = 42;
  std::vector<std::string> policies = {"lru", "lfu", "score"};
};

struct PolicyTraceResult {
  std::string policy;
  double device_important_hit_ratio = 0;  // important rows found on the device / requested
  double device_hit_ratio = 0;            // chunk accesses that hit the device
  double host_important_hit_ratio = 0;
  uint64_t promotions = 0;
  uint64_t important_rows_to_device = 0;  // important rows that had to cross to the device
};

// InvalidArgument on bad options or an unknown policy.
Result<std::vector<PolicyTraceResult>> RunPolicyTrace(const PolicyTraceOptions& options);

}  // namespace tierkv::sim

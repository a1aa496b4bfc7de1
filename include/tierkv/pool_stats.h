// The device and host pools' counters (Engine::PoolStatistics, the
// server's /v1/cache and /metrics): what the tiered cache (src/cache/)
// reports, public so that the API does not return an internal type.
#pragma once

#include <cstdint>

namespace tierkv::cache {

struct CacheStats {
  uint64_t accesses = 0;
  uint64_t hits[3] = {0, 0, 0};             // by Tier: device, host, disk (miss)
  uint64_t important_rows[3] = {0, 0, 0};   // important rows requested, by the tier that had them
  uint64_t rows[3] = {0, 0, 0};
  uint64_t admissions[3] = {0, 0, 0};       // where Admit placed chunks
  uint64_t promotions = 0, demotions = 0, host_drops = 0;
  uint64_t offloads = 0;                    // demotions by the offload thread
  uint64_t bytes_to_device = 0, bytes_to_host = 0;  // copies into each pool
  uint64_t device_used = 0, host_used = 0, device_chunks = 0, host_chunks = 0;
  uint64_t pinned_skips = 0;                // evictions that skipped a pinned chunk
  double device_hit_ratio() const;
  double device_important_hit_ratio() const;  // IMPRESS' measure
};

}  // namespace tierkv::cache

// Cache policies: how valuable a chunk is, from its access statistics.
//
// Every policy is a priority over chunks; the pools keep the highest. The
// placement rules (cache/tiered_cache.h) are the same for all policies, so
// that they differ only in what they value:
//   lru    the logical time of the last access
//   lfu    the number of accesses
//   score  IMPRESS 4.4.2: access frequency x important-row ratio, both moving
//          averages updated at every access
//   car    CaR III-C: a score the scheduler moves (+1 when a request enters
//          its window, +1 when it starts, -2 when it finishes)
// Ties are broken by recency, so `car` without scheduler events is LRU.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "tierkv/status.h"

namespace tierkv::cache {

enum class PolicyKind : uint8_t { kLru, kLfu, kScore, kCar };

Result<PolicyKind> ParsePolicy(std::string_view name);
const char* PolicyName(PolicyKind kind);

struct PolicyParams {
  // score: the access frequency decays by half every `freq_half_life` cache
  // accesses (the logical clock), so that it is a moving average of the
  // recent access rate rather than a lifetime count.
  double freq_half_life = 4096;
  // score: weight of the newest observation in the important-row ratio's
  // exponential moving average.
  double ratio_weight = 0.25;
};

// Per-chunk access statistics, kept while the chunk exists on any tier.
struct ChunkStats {
  uint64_t accesses = 0;
  uint64_t last_access = 0;     // logical clock of the last access
  double log2_freq = 0;         // score: log2 of the decayed frequency at last_access
  double important_ratio = 0;   // score: moving average of important rows / rows
  double car_score = 0;         // car: moved by scheduler events
};

// Updates `s` for one access at logical time `now` that needed
// `important_ratio` (in [0, 1]) of the chunk's rows.
void RecordAccess(ChunkStats* s, double important_ratio, uint64_t now, const PolicyParams& p);

// The chunk's value under `kind`: comparable between chunks at any time
// (score's decay is folded in as log2(freq) + t / half_life, which orders
// chunks as their current decayed frequencies would, without updating the
// chunks that were not accessed).
double Priority(PolicyKind kind, const ChunkStats& s, const PolicyParams& p);

}  // namespace tierkv::cache

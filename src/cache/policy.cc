#include "cache/policy.h"

#include <algorithm>
#include <cmath>

namespace tierkv::cache {

Result<PolicyKind> ParsePolicy(std::string_view name) {
  if (name == "lru") return PolicyKind::kLru;
  if (name == "lfu") return PolicyKind::kLfu;
  if (name == "score") return PolicyKind::kScore;
  if (name == "car") return PolicyKind::kCar;
  return Status::InvalidArgument("unknown cache policy '" + std::string(name) +
                                 "' (expected lru, lfu, score or car)");
}

const char* PolicyName(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kLru: return "lru";
    case PolicyKind::kLfu: return "lfu";
    case PolicyKind::kScore: return "score";
    case PolicyKind::kCar: return "car";
  }
  return "?";
}

void RecordAccess(ChunkStats* s, double important_ratio, uint64_t now, const PolicyParams& p) {
  const double x = std::clamp(important_ratio, 0.0, 1.0);
  if (s->accesses == 0) {
    s->log2_freq = 0;  // one access
    s->important_ratio = x;
  } else {
    // f(now) = f(last) * 2^-(dt/h) + 1, kept in log2 so that it never overflows.
    const double dt = static_cast<double>(now - s->last_access);
    const double decayed = s->log2_freq - dt / p.freq_half_life;
    s->log2_freq = std::log2(std::exp2(decayed) + 1.0);
    s->important_ratio += p.ratio_weight * (x - s->important_ratio);
  }
  s->accesses++;
  s->last_access = now;
}

double Priority(PolicyKind kind, const ChunkStats& s, const PolicyParams& p) {
  switch (kind) {
    case PolicyKind::kLru:
      return static_cast<double>(s.last_access);
    case PolicyKind::kLfu:
      return static_cast<double>(s.accesses);
    case PolicyKind::kScore: {
      if (s.accesses == 0) return -1e300;
      // log2(freq(t) * ratio) + t/h: the order of freq(now) * ratio for every now.
      const double ratio = std::max(s.important_ratio, 1e-9);
      return s.log2_freq + static_cast<double>(s.last_access) / p.freq_half_life +
             std::log2(ratio);
    }
    case PolicyKind::kCar:
      return s.car_score;
  }
  return 0;
}

}  // namespace tierkv::cache

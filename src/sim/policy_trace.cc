#include "tierkv/tools/policy_trace.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "cache/tiered_cache.h"

namespace tierkv::sim {

Result<std::vector<PolicyTraceResult>> RunPolicyTrace(const PolicyTraceOptions& o) {
  if (o.chunks < 2) return Status::InvalidArgument("chunks must be >= 2");
  if (o.accesses < 1) return Status::InvalidArgument("accesses must be >= 1");
  if (!(o.zipf_s >= 0)) return Status::InvalidArgument("zipf_s must be >= 0");
  if (!(o.device_fraction > 0 && o.device_fraction < 1) ||
      !(o.host_fraction >= 0 && o.device_fraction + o.host_fraction < 1)) {
    return Status::InvalidArgument(
        "device_fraction must be in (0, 1) and device_fraction + host_fraction below 1");
  }
  if (o.rows < 1) return Status::InvalidArgument("rows must be >= 1");
  if (!(o.min_ratio >= 0 && o.min_ratio <= 1)) {
    return Status::InvalidArgument("min_ratio must be in [0, 1]");
  }
  if (!(o.warmup_fraction >= 0 && o.warmup_fraction < 1)) {
    return Status::InvalidArgument("warmup_fraction must be in [0, 1)");
  }
  std::vector<cache::PolicyKind> kinds;
  for (const auto& p : o.policies) {
    ASSIGN_OR_RETURN(cache::PolicyKind k, cache::ParsePolicy(p));
    kinds.push_back(k);
  }

  // The trace: which chunk, and how many of its rows the request needs.
  std::mt19937_64 rng(o.seed);
  const size_t n = static_cast<size_t>(o.chunks);
  std::vector<double> cdf(n);
  double acc = 0;
  for (size_t r = 0; r < n; ++r) {
    acc += 1.0 / std::pow(static_cast<double>(r + 1), o.zipf_s);
    cdf[r] = acc;
  }
  std::vector<uint64_t> chunk_of_rank(n);
  std::iota(chunk_of_rank.begin(), chunk_of_rank.end(), 0);
  std::shuffle(chunk_of_rank.begin(), chunk_of_rank.end(), rng);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  std::vector<double> ratio(n);
  for (auto& r : ratio) r = o.min_ratio + (1.0 - o.min_ratio) * uni(rng);
  std::normal_distribution<double> noise(0.0, o.ratio_noise);
  struct Access {
    uint64_t chunk;
    uint32_t important;
  };
  std::vector<Access> trace(static_cast<size_t>(o.accesses));
  for (auto& a : trace) {
    const size_t rank = static_cast<size_t>(
        std::lower_bound(cdf.begin(), cdf.end(), uni(rng) * acc) - cdf.begin());
    a.chunk = chunk_of_rank[std::min(rank, n - 1)];
    const double x = std::clamp(ratio[a.chunk] + (o.ratio_noise > 0 ? noise(rng) : 0.0), 0.0, 1.0);
    a.important = static_cast<uint32_t>(std::lround(x * o.rows));
  }

  const uint64_t chunk_bytes = o.rows;  // every chunk the same size; the unit is arbitrary
  const size_t warmup = static_cast<size_t>(o.warmup_fraction * static_cast<double>(o.accesses));
  std::vector<PolicyTraceResult> out;
  for (size_t i = 0; i < kinds.size(); ++i) {
    cache::CacheOptions co;
    co.policy = kinds[i];
    co.device_bytes = static_cast<uint64_t>(std::floor(o.device_fraction * o.chunks)) * chunk_bytes;
    co.host_bytes = static_cast<uint64_t>(std::floor(o.host_fraction * o.chunks)) * chunk_bytes;
    co.offload_watermark = 0;  // synchronous, so that the replay is deterministic
    ASSIGN_OR_RETURN(auto c, cache::TieredCache::Create(co));
    cache::CacheStats before;
    for (size_t t = 0; t < trace.size(); ++t) {
      if (t == warmup) before = c->stats();
      const uint64_t key = trace[t].chunk;
      if (kinds[i] == cache::PolicyKind::kCar) {
        // Without a scheduler queue every request enters, starts and
        // finishes around its one access.
        c->OnRequestEvent({&key, 1}, cache::RequestEvent::kEnterWindow);
        c->OnRequestEvent({&key, 1}, cache::RequestEvent::kStart);
      }
      cache::Pin p = c->Access(key, trace[t].important, o.rows);
      if (p.tier() == cache::Tier::kDisk) p = c->Admit(key, chunk_bytes, nullptr);
      p.Release();
      if (kinds[i] == cache::PolicyKind::kCar) {
        c->OnRequestEvent({&key, 1}, cache::RequestEvent::kFinish);
      }
    }
    const cache::CacheStats s = c->stats();
    cache::CacheStats d;
    for (int t = 0; t < 3; ++t) {
      d.hits[t] = s.hits[t] - before.hits[t];
      d.important_rows[t] = s.important_rows[t] - before.important_rows[t];
    }
    PolicyTraceResult r;
    r.policy = o.policies[i];
    r.device_important_hit_ratio = d.device_important_hit_ratio();
    r.device_hit_ratio = d.device_hit_ratio();
    const uint64_t imp = d.important_rows[0] + d.important_rows[1] + d.important_rows[2];
    r.host_important_hit_ratio = imp ? static_cast<double>(d.important_rows[1]) / imp : 0.0;
    r.promotions = s.promotions - before.promotions;
    r.important_rows_to_device = d.important_rows[1] + d.important_rows[2];
    out.push_back(r);
  }
  return out;
}

}  // namespace tierkv::sim

// The server's measurements, rendered in Prometheus' text format (GET
// /metrics): requests by endpoint and status, latency histograms (TTFT,
// time per output token, queue wait, whole request), token counts, reuse
// by tier, the share of prefix rows loaded, probe fallbacks; with the
// scheduler's, store's and pools' current figures at render time.
//
// Thread-safe: HTTP workers count requests, the scheduler thread observes
// outcomes (its OutcomeObserver), any worker renders.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cache/tiered_cache.h"
#include "sched/job.h"
#include "sched/scheduler.h"
#include "tierkv/mutex.h"
#include "tierkv/store.h"

namespace tierkv::server {

// A histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double x);
  // Appends name_bucket{le=...}, name_sum, name_count.
  void Render(const std::string& name, std::string* out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bound, not cumulative; the last: above every bound
  double sum_ = 0;
  uint64_t count_ = 0;
};

// What exists only at render time.
struct Snapshot {
  size_t queued = 0, running = 0;
  store::StoreStats store;
  cache::CacheStats pools;
  sched::SchedulerStats scheduler;
  RemoteStats remote;
  bool has_remote = false;  // --remote given: the remote tier's series are shown
  // The HTTP side's connections (server/http_guard.h's ConnectionCounts).
  uint64_t http_open = 0, http_refused = 0, http_refused_per_address = 0, http_timed_out = 0;
  engine::StoreBehindStats behind;  // prompts stored behind their requests
};

class Metrics {
 public:
  Metrics();
  void CountRequest(const std::string& endpoint, int http_status) TIERKV_EXCLUDES(mu_);
  // A generation that ended (any reason), with the seconds since its arrival.
  void ObserveOutcome(const sched::Outcome& o, double request_seconds) TIERKV_EXCLUDES(mu_);
  std::string Render(const Snapshot& now) const TIERKV_EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_ TIERKV_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> finished_ TIERKV_GUARDED_BY(mu_);  // by finish reason
  Histogram ttft_ TIERKV_GUARDED_BY(mu_), tpot_ TIERKV_GUARDED_BY(mu_), queue_ TIERKV_GUARDED_BY(mu_),
      e2e_ TIERKV_GUARDED_BY(mu_);
  // The engine's per-request counts, summed.
  struct Totals {
    uint64_t prompt_tokens = 0, reused_tokens = 0, completion_tokens = 0;
    double decode_seconds = 0;
    std::array<uint64_t, 3> hits{}, bytes{};  // device, host, disk
    double rows_used = 0, rows_offered = 0;   // prefix rows attended, of those stored
    uint64_t reuse_layers = 0, fallback_layers = 0, retried = 0;
    // By where the prefix was while the request waited (engine::PrefixPlace):
    // requests, and the seconds their prefill waited for prefix reads.
    std::array<uint64_t, 3> waited{};
    std::array<double, 3> load_wait_seconds{};
    std::array<uint64_t, 3> prefetched{};  // by where the prefix was when it started
  } totals_ TIERKV_GUARDED_BY(mu_);
};

}  // namespace tierkv::server

// CaR's timed prefetcher (III-B2): its own thread, `tierkv-prefetch`, loads
// a waiting job's stored prefix into the pools (Engine::Prefetch) so that
// the job starts from memory. The scheduler decides when (Due): once the
// running jobs' least predicted remaining time (time per output token x
// tokens left to max_tokens), less one round (it decides once a round), is
// at most the prefix's transfer time at the bandwidth prefetches have
// measured; before any measurement, at once.
// One prefetch at a time: a second would compete with the first for the
// disk and the pools.
//
// Thread-safe: Submit and the getters from the scheduler thread, the work
// on the prefetch thread; the job is shared, its prompt read-only.
#pragma once

#include <cstdint>
#include <memory>
#include <thread>

#include "sched/job.h"
#include "tierkv/engine.h"
#include "tierkv/mutex.h"

namespace tierkv::sched {

struct PrefetchStats {
  uint64_t prefetches = 0;  // finished (not failed)
  uint64_t failed = 0;      // a read failed: the job will load (or recompute) itself
  uint64_t bytes = 0;       // read from disk
  double bytes_per_ms = 0;  // measured bandwidth (moving average); 0: none yet
};

class Prefetcher {
 public:
  // The engine must outlive the prefetcher. Starts the thread.
  explicit Prefetcher(engine::Engine* engine);
  ~Prefetcher();  // finishes the prefetch in flight, then stops
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Whether `bytes` should start loading now, with the running jobs' least
  // remaining time `least_remaining_ms`.
  bool Due(double least_remaining_ms, uint64_t bytes) const TIERKV_EXCLUDES(mu_);
  // Whether a prefetch is queued or running; for `job`, whether its is.
  bool busy() const TIERKV_EXCLUDES(mu_);
  bool Loading(const Job* job) const TIERKV_EXCLUDES(mu_);
  // Loads `job`'s prefix on the prefetch thread; false (nothing done) when busy.
  bool Submit(std::shared_ptr<Job> job) TIERKV_EXCLUDES(mu_);
  PrefetchStats stats() const TIERKV_EXCLUDES(mu_);

  // Weight of the past in the bandwidth's moving average.
  static constexpr double kMemory = 0.7;

 private:
  void Loop();

  engine::Engine* const engine_;
  mutable Mutex mu_;
  CondVar cv_;
  std::shared_ptr<Job> next_ TIERKV_GUARDED_BY(mu_);  // queued or in flight
  bool stop_ TIERKV_GUARDED_BY(mu_) = false;
  PrefetchStats stats_ TIERKV_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace tierkv::sched

// Which waiting job starts next: the scheduler's one choice of policy.
// The scheduler takes jobs from its queue while the policy has Room, hands
// them over (Arrive), and each round starts what Pick releases, in order;
// it never looks at how a policy holds or orders its jobs.
//
//   fcfs  arrival order: a job leaves the queue only when a slot is free
//         and starts in the same round (waiting_policy.cc).
//   car   CaR's shuffled window, score events and timed prefetch
//         (car_policy.h).
//
// Adding a policy: a file pair implementing WaitingPolicy, a SchedulerKind
// and its name (scheduler.h/.cc), a line in MakeWaitingPolicy.
//
// Thread safety: a policy is owned and called by the scheduler thread
// alone (its prefetcher has its own thread and locks).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "sched/job.h"
#include "sched/prefetcher.h"
#include "tierkv/engine.h"

namespace tierkv::sched {

// A job leaving the policy to start.
struct Release {
  std::shared_ptr<Job> job;
  // Where its prefix was located at its start and at its entry (score
  // events: `located` only); whether it was handed to the prefetcher.
  engine::PrefixLocation where;
  engine::PrefixPlace entered_as = engine::PrefixPlace::kNone;
  bool located = false;
  bool prefetched = false;
};

class WaitingPolicy {
 public:
  virtual ~WaitingPolicy() = default;
  // How many more jobs may leave the queue now, with `running` jobs running
  // and at most `max_running` (past a drain's deadline the scheduler takes
  // them all regardless).
  virtual size_t Room(size_t running, size_t max_running) const = 0;
  // Jobs that left the queue, in arrival order.
  virtual void Arrive(std::vector<std::shared_ptr<Job>> jobs) = 0;
  // The jobs to start now, in order: at most `free_slots` (all of them past
  // the deadline) plus every cancelled one (starting ends it at once).
  virtual std::vector<Release> Pick(size_t free_slots, bool past_deadline) = 0;
  // After the round's starts, with the time until the first running job is
  // predicted to free its slot (infinity when none runs): car's prefetcher.
  virtual void AfterStarts(double slot_free_ms) {}
  // Jobs held between Arrive and Pick.
  virtual size_t size() const = 0;
  // Cancels every held job (a drain's deadline); Pick then releases them.
  virtual void CancelAll() = 0;
  // Whether the scheduler raises CaR's score events for the jobs it starts.
  virtual bool raises_events() const { return false; }
  virtual PrefetchStats prefetch_stats() const { return {}; }
};

enum class SchedulerKind { kFcfs, kCar };

// The policy of `kind`; `window` and `prefetch` are car's. The engine must
// outlive the policy.
std::unique_ptr<WaitingPolicy> MakeWaitingPolicy(SchedulerKind kind, engine::Engine* engine, size_t window,
                                                 bool prefetch);

}  // namespace tierkv::sched

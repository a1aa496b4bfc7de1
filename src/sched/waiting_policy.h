// Which waiting job starts next: the scheduler's one choice of policy.
// The scheduler takes jobs from its queue while the policy has Room, hands
// them over (Arrive), and each round starts what Next releases, one at a
// time (a job that ends as it starts frees its slot for the next at once);
// it never looks at how a policy holds or orders its jobs.
//
//   fcfs  the order the queue hands jobs over (arrival order, the tenants
//         taking turns: fair_queue.h): a job leaves the queue only when a
//         slot is free and starts in the same round (waiting_policy.cc).
//   car   CaR's shuffled window, score events and timed prefetch
//         (car_policy.h).
//
// Adding a policy: a file pair implementing WaitingPolicy, a SchedulerKind
// (below), its name in ParseScheduler (scheduler.cc), a line in
// MakeWaitingPolicy.
//
// Thread safety: a policy is owned and called by the scheduler thread
// alone, but for prefetch_stats (any thread: the prefetcher locks its own).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
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
  // Whether jobs stay in the policy across rounds (car's window): they are
  // counted as waiting until they start. A policy that starts what it takes
  // in the same round has them counted as running from the queue on, so
  // that they never hold queue places (429s) during the round's prefills.
  virtual bool keeps_waiting() const { return false; }
  // Jobs that left the queue, in arrival order.
  virtual void Arrive(std::vector<std::shared_ptr<Job>> jobs) = 0;
  // Before the round's starts; `slot_free`: a job may start (car locates
  // its entries again then).
  virtual void BeginRound(bool slot_free) {}
  // The next job to start: a cancelled one whenever it holds one (starting
  // ends it), else, when `slot_free` (always, past a drain's deadline), the
  // one it starts next; nothing when none.
  virtual std::optional<Release> Next(bool slot_free) = 0;
  // After the round's starts, with the time until the first running job is
  // predicted to free its slot (infinity when none runs): car's prefetcher.
  virtual void AfterStarts(double slot_free_ms) {}
  // Jobs held between Arrive and Next.
  virtual size_t size() const = 0;
  // Cancels every held job (a drain's deadline); Next then releases them.
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

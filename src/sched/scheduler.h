// The scheduler: a bounded queue of generation jobs and the one thread,
// `tierkv-sched`, that runs them on the engine. Jobs start while fewer than
// max_running are running; each round then advances every running job by
// one token in one batched forward pass (Sequence::StepBatch: the
// projections are one matrix product over all running jobs, attention is
// each job's own), continuous batching: prefills run between rounds, so a
// long prompt delays the running jobs' next token by its prefill.
//
// Which job starts next is the waiting policy's (waiting_policy.h: fcfs,
// car); the scheduler raises CaR's start and end score events for the jobs
// a policy located.
//
// Redis is never asked on the scheduler thread where it can be avoided: a
// job's remote lookups run ahead (Engine::FetchAhead, the remote tier's
// `tierkv-remote-ah` thread) while it is queued, and the job is taken from
// the queue only once they are over, its prefill then reading the local
// store alone; queued jobs whose fetch is over overtake those still
// fetching, so a slow Redis delays only the prompts that asked it. (A
// reader of important parts, --remote-read important, still fetches them
// in its prefill: each exchange bounded by --remote-timeout-ms.)
//
// Ownership: the scheduler thread alone owns the waiting policy and every
// running job's K/V (a Sequence), freed when the job ends or is cancelled;
// it (and its policy) call the engine's Serve, Locate and OnSchedulerEvent,
// car's prefetch thread its Prefetch.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "sched/fair_queue.h"
#include "sched/job.h"
#include "sched/prefetcher.h"
#include "sched/waiting_policy.h"
#include "tierkv/engine.h"
#include "tierkv/model.h"
#include "tierkv/mutex.h"
#include "tierkv/sequence.h"
#include "tierkv/tokenizer.h"

namespace tierkv::sched {

// InvalidArgument naming the known ones.
Result<SchedulerKind> ParseScheduler(std::string_view name);

struct SchedulerOptions {
  size_t max_queue = 64;   // jobs waiting for a slot (in the window too); more are refused
  size_t max_running = 8;  // jobs decoding at once
  SchedulerKind kind = SchedulerKind::kFcfs;
  size_t window = 8;       // car: the shuffled window's size
  bool prefetch = true;    // car: the timed prefetcher
  Status Validate() const;
};

// What the scheduler has done since it started (the server's metrics).
struct SchedulerStats {
  uint64_t started[3] = {0, 0, 0};  // jobs started, by engine::PrefixPlace at their start
  PrefetchStats prefetch;
};

// Told of every job that ends (any reason: finished, cancelled, failed),
// with the seconds from its arrival, on the scheduler thread, before the
// job's worker sees the end: the one place outcomes are counted.
using OutcomeObserver = std::function<void(const Outcome& o, double request_seconds)>;

class Scheduler {
 public:
  // model, tokenizer and engine must outlive the scheduler. Starts the thread.
  Scheduler(const Model& model, const Tokenizer& tokenizer, engine::Engine* engine,
            SchedulerOptions options, OutcomeObserver on_end = {});
  ~Scheduler();  // Shutdown(0)
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues `job`. ResourceExhausted when max_running + max_queue jobs are
  // already in (queued, waiting or running: jobs queued while the thread is
  // in a round's prefills are bound for free slots, not queue places) or
  // when its tenant holds its share of the queue (FairQueue::Push; a job of
  // a tenant over its share may be ended with ResourceExhausted to make
  // room). Unavailable once draining.
  Status Submit(std::shared_ptr<Job> job) TIERKV_EXCLUDES(mu_);
  // Stops taking jobs; what is queued or running may finish until `grace`
  // has passed, then is cancelled. Returns at once.
  void Drain(std::chrono::milliseconds grace) TIERKV_EXCLUDES(mu_);
  // Drain(grace), waits for every job to end and joins the thread.
  void Shutdown(std::chrono::milliseconds grace) TIERKV_EXCLUDES(mu_);

  // Jobs waiting: queued, and held across rounds by the policy (car's window).
  size_t queued() const TIERKV_EXCLUDES(mu_);
  SchedulerStats stats() const;
  // Jobs taken from the queue whose end has not been published; a job's
  // End() happens after it leaves this count.
  size_t running() const { return running_count_; }

 private:
  struct Running;
  void Loop();
  // Takes the jobs the policy has room for from the queue, round-robin
  // across tenants (FairQueue::Take), of those whose remote lookups are
  // over (all of them past the deadline, to be cancelled).
  std::vector<std::shared_ptr<Job>> TakeArrivals(bool past_deadline) TIERKV_REQUIRES(mu_);
  // Hands the arrivals to the policy, starts what it releases, then tells
  // it when the first slot frees.
  void RunPolicy(std::vector<std::shared_ptr<Job>> arrived, bool past_deadline);
  // The running jobs' least predicted remaining time, less one round
  // (decided once a round); infinity when none runs.
  double SlotFreeMs() const;
  // A released job's prefill (Serve); it runs from the next round.
  void Start(Release rel);
  // Samples `r`'s next token from its logits and hands the text on; false
  // once the job has ended (cancelled, a stop, its length), else the token
  // (r.prev) is to run in the next pass.
  bool Decide(Running& r);
  // One decode pass for every running job (Sequence::StepBatch), then
  // Decide for each.
  void StepAll();
  // Where the job's prefix was while it waited and when it started: into
  // its outcome and the scheduler's counts.
  void Counted(Running& r, engine::PrefixPlace waited, engine::PrefixPlace started);
  void End(Running& r, FinishReason reason, Status status = Status::Ok());

  const Model& model_;
  const Tokenizer& tok_;
  engine::Engine* const engine_;
  const SchedulerOptions opts_;
  const OutcomeObserver on_end_;

  mutable Mutex mu_;
  CondVar cv_;
  FairQueue queue_ TIERKV_GUARDED_BY(mu_);
  bool draining_ TIERKV_GUARDED_BY(mu_) = false;
  Clock::time_point deadline_ TIERKV_GUARDED_BY(mu_);  // cancel what is left after this (draining)

  std::vector<std::unique_ptr<Running>> running_;  // the scheduler thread's alone
  const std::unique_ptr<WaitingPolicy> policy_;    // the scheduler thread's alone
  double round_ms_ = 0;  // a round's time (moving average): the time per output token
  std::atomic<size_t> running_count_{0};
  std::atomic<size_t> waiting_count_{0};  // jobs a keeps_waiting policy holds
  std::atomic<uint64_t> started_[3] = {0, 0, 0};
  std::thread thread_;
};

}  // namespace tierkv::sched

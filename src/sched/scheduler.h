// The scheduler: a bounded queue of generation jobs and the one thread,
// `tierkv-sched`, that runs them on the engine. First come, first served:
// jobs start in arrival order while fewer than max_running are running;
// each round then advances every running job by one token (prefills run
// between rounds, so a long prompt delays the running jobs' next token by
// its prefill, as in continuous batching). A round runs one forward pass per
// running job (the model has no batched decode yet).
//
// Ownership: the scheduler thread alone calls the engine and owns every
// running job's K/V (a Sequence), freed when the job ends or is cancelled.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "sched/job.h"
#include "tierkv/engine.h"
#include "tierkv/model.h"
#include "tierkv/mutex.h"
#include "tierkv/sequence.h"
#include "tierkv/tokenizer.h"

namespace tierkv::sched {

struct SchedulerOptions {
  size_t max_queue = 64;   // jobs waiting to start; more are refused
  size_t max_running = 8;  // jobs decoding at once
  Status Validate() const;
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

  // Queues `job`. ResourceExhausted when the queue is full, Unavailable
  // once draining.
  Status Submit(std::shared_ptr<Job> job) TIERKV_EXCLUDES(mu_);
  // Stops taking jobs; what is queued or running may finish until `grace`
  // has passed, then is cancelled. Returns at once.
  void Drain(std::chrono::milliseconds grace) TIERKV_EXCLUDES(mu_);
  // Drain(grace), waits for every job to end and joins the thread.
  void Shutdown(std::chrono::milliseconds grace) TIERKV_EXCLUDES(mu_);

  size_t queued() const TIERKV_EXCLUDES(mu_);
  // Jobs taken from the queue whose end has not been published; a job's
  // End() happens after it leaves this count.
  size_t running() const { return running_count_; }

 private:
  struct Running;
  void Loop();
  void Start(std::shared_ptr<Job> job);
  // One token for `r`: false once the job has ended.
  bool Advance(Running& r);
  void End(Running& r, FinishReason reason, Status status = Status::Ok());

  const Model& model_;
  const Tokenizer& tok_;
  engine::Engine* const engine_;
  const SchedulerOptions opts_;
  const OutcomeObserver on_end_;

  mutable Mutex mu_;
  CondVar cv_;
  std::deque<std::shared_ptr<Job>> queue_ TIERKV_GUARDED_BY(mu_);
  bool draining_ TIERKV_GUARDED_BY(mu_) = false;
  Clock::time_point deadline_ TIERKV_GUARDED_BY(mu_);  // cancel what is left after this (draining)

  std::vector<std::unique_ptr<Running>> running_;  // the scheduler thread's alone
  std::atomic<size_t> running_count_{0};
  std::thread thread_;
};

}  // namespace tierkv::sched

// A fixed pool of named worker threads for data-parallel loops (the compute
// threads of docs/threads.md). ParallelFor is reentrant and may be called from
// several threads at once; the caller works too, so a pool of n-1 workers
// keeps n cores busy. Thread-safe.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tierkv/mutex.h"

namespace tierkv {

class ThreadPool {
 public:
  // `workers` may be 0: ParallelFor then runs everything on the caller.
  ThreadPool(int workers, const std::string& name);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Calls fn(i) once for each i in [0, n) and returns when all calls are done.
  // fn must not throw.
  void ParallelFor(int n, const std::function<void(int)>& fn);
  int workers() const { return static_cast<int>(threads_.size()); }

  // A process-wide pool with hardware_concurrency - 1 workers (at least 0),
  // or TIERKV_THREADS - 1 if that variable is set.
  static ThreadPool* Compute();

 private:
  struct Job {
    const std::function<void(int)>* fn;
    int n;
    std::atomic<int> next{0};
    std::atomic<int> done{0};
  };
  static void RunSome(Job* job);
  void WorkerLoop();

  Mutex mu_;
  CondVar work_cv_;  // workers wait for jobs
  CondVar done_cv_;  // callers wait for their job to finish
  std::deque<std::shared_ptr<Job>> jobs_ TIERKV_GUARDED_BY(mu_);
  std::atomic<int> queued_{0};  // jobs_.size(), readable without mu_
  bool stop_ TIERKV_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tierkv

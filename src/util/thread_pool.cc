#include "util/thread_pool.h"

#include <pthread.h>

#include <immintrin.h>

#include <cstdlib>

namespace tierkv {
namespace {

// A forward pass issues dozens of short parallel loops; a worker that slept
// after each would pay a futex wake-up per loop. Spin this many pause
// instructions (tens of microseconds) for the next job first.
constexpr int kSpinIterations = 20000;

}  // namespace

ThreadPool::ThreadPool(int workers, const std::string& name) {
  for (int i = 0; i < workers; ++i) {
    threads_.emplace_back([this] { WorkerLoop(); });
    const std::string tname = (name + "-" + std::to_string(i)).substr(0, 15);
    pthread_setname_np(threads_.back().native_handle(), tname.c_str());
  }
}

ThreadPool::~ThreadPool() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  work_cv_.SignalAll();
  for (auto& t : threads_) t.join();
}

void ThreadPool::RunSome(Job* job) {
  for (;;) {
    const int i = job->next.fetch_add(1, std::memory_order_relaxed);
    if (i >= job->n) return;
    (*job->fn)(i);
    job->done.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    for (int i = 0; i < kSpinIterations && queued_.load(std::memory_order_acquire) == 0; ++i) {
      _mm_pause();
    }
    std::shared_ptr<Job> job;
    {
      MutexLock l(&mu_);
      while (!stop_ && jobs_.empty()) work_cv_.Wait(&mu_);
      if (stop_) return;
      job = jobs_.front();
      // Every index handed out: the job leaves the queue; its caller and the
      // workers already in it finish it.
      if (job->next.load(std::memory_order_relaxed) >= job->n) {
        jobs_.pop_front();
        queued_.store(static_cast<int>(jobs_.size()), std::memory_order_release);
        continue;
      }
    }
    RunSome(job.get());
    {
      MutexLock l(&mu_);
      if (!jobs_.empty() && jobs_.front() == job) jobs_.pop_front();
      queued_.store(static_cast<int>(jobs_.size()), std::memory_order_release);
    }
    done_cv_.SignalAll();
  }
}

void ThreadPool::ParallelFor(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  if (threads_.empty() || n == 1) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->n = n;
  {
    MutexLock l(&mu_);
    jobs_.push_back(job);
    queued_.store(static_cast<int>(jobs_.size()), std::memory_order_release);
  }
  work_cv_.SignalAll();
  RunSome(job.get());
  for (int i = 0; i < kSpinIterations && job->done.load(std::memory_order_acquire) != n; ++i) {
    _mm_pause();
  }
  MutexLock l(&mu_);
  while (job->done.load(std::memory_order_acquire) != n) done_cv_.Wait(&mu_);
  for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
    if (*it == job) {
      jobs_.erase(it);
      break;
    }
  }
  queued_.store(static_cast<int>(jobs_.size()), std::memory_order_release);
}

ThreadPool* ThreadPool::Compute() {
  static ThreadPool* pool = [] {
    int n = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("TIERKV_THREADS")) n = std::atoi(env);
    return new ThreadPool(std::max(0, n - 1), "tierkv-compute");  // lives until exit
  }();
  return pool;
}

}  // namespace tierkv

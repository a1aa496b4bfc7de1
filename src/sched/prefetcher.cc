#include "sched/prefetcher.h"

#include <pthread.h>

#include "tierkv/logging.h"

namespace tierkv::sched {

Prefetcher::Prefetcher(engine::Engine* engine) : engine_(engine) {
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "tierkv-prefetch");
    Loop();
  });
}

Prefetcher::~Prefetcher() {
  {
    MutexLock l(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  thread_.join();
}

bool Prefetcher::Due(double least_remaining_ms, uint64_t bytes) const {
  MutexLock l(&mu_);
  if (stats_.bytes_per_ms <= 0) return true;
  return least_remaining_ms <= static_cast<double>(bytes) / stats_.bytes_per_ms;
}

bool Prefetcher::busy() const {
  MutexLock l(&mu_);
  return next_ != nullptr;
}

bool Prefetcher::Loading(const Job* job) const {
  MutexLock l(&mu_);
  return next_.get() == job;
}

bool Prefetcher::Submit(std::shared_ptr<Job> job) {
  MutexLock l(&mu_);
  if (next_ || stop_) return false;
  next_ = std::move(job);
  cv_.SignalAll();
  return true;
}

PrefetchStats Prefetcher::stats() const {
  MutexLock l(&mu_);
  return stats_;
}

void Prefetcher::Loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      MutexLock l(&mu_);
      while (!next_ && !stop_) cv_.Wait(&mu_);
      if (stop_) return;
      job = next_;
    }
    auto r = engine_->Prefetch(job->params().prompt, job->params().cache_namespace);
    if (!r.ok()) {
      TIERKV_LOG(kWarn) << "prefetch: " << r.status().ToString();
    }
    MutexLock l(&mu_);
    next_.reset();
    if (!r.ok()) {
      ++stats_.failed;
      continue;
    }
    ++stats_.prefetches;
    stats_.bytes += r->disk_bytes_read;
    if (r->disk_bytes_read > 0 && r->ms > 0) {
      const double bw = static_cast<double>(r->disk_bytes_read) / r->ms;
      stats_.bytes_per_ms = stats_.bytes_per_ms <= 0 ? bw : kMemory * stats_.bytes_per_ms + (1 - kMemory) * bw;
    }
  }
}

}  // namespace tierkv::sched

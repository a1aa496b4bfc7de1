#include "engine/store_queue.h"

#include <pthread.h>

#include <algorithm>

#include "tierkv/elapsed.h"
#include "tierkv/logging.h"

namespace tierkv::engine {

uint64_t StoreQueue::Job::bytes() const {
  uint64_t b = tokens.size() * sizeof(int32_t);
  for (size_t l = 0; l < k.size(); ++l) b += k[l].size() + v[l].size();
  for (const auto& s : importance) b += s.size() * sizeof(float);
  return b;
}

StoreQueue::StoreQueue(remote::StoreTiers* tiers, uint64_t max_bytes) : tiers_(tiers), max_bytes_(max_bytes) {
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "tierkv-store-w");
    Loop();
  });
}

StoreQueue::~StoreQueue() {
  {
    MutexLock l(&mu_);
    stop_ = true;
    if (!queue_.empty()) {
      TIERKV_LOG(kWarn) << "store: " << queue_.size() << " prompts queued for storing are dropped at shutdown";
      stats_.dropped += queue_.size();
    }
    queue_.clear();
    queued_bytes_ = 0;
    cv_.SignalAll();
  }
  thread_.join();
}

bool StoreQueue::StalledLocked() const {
  return running_ && MsSince(started_) > kStallMs;
}

bool StoreQueue::Enqueue(Job job) {
  const uint64_t b = job.bytes();
  MutexLock l(&mu_);
  const bool stalled = StalledLocked();
  if (stop_ || stalled || (queued_bytes_ + b > max_bytes_ && !queue_.empty())) {
    ++stats_.dropped;
    if (stats_.dropped == 1 || stats_.dropped % 100 == 0) {
      TIERKV_LOG(kWarn) << "store: a prompt is not stored (" << stats_.dropped << " so far): "
                        << (stalled ? "the disk has not finished a write for " +
                                          std::to_string(static_cast<long long>(MsSince(started_) / 1000)) + " s"
                                    : "the queue of prompts to store is full");
    }
    return false;
  }
  queued_bytes_ += b;
  queue_.push_back(std::move(job));
  cv_.SignalAll();
  return true;
}

bool StoreQueue::SharesLocked(std::span<const int32_t> tokens, uint64_t ns, size_t prefix) const {
  const size_t n = std::min(prefix, tokens.size());
  const auto shares = [&](const Job& j) {
    return j.ns == ns && j.tokens.size() >= n && std::equal(tokens.begin(), tokens.begin() + n, j.tokens.begin());
  };
  if (running_ && shares(current_)) return true;
  return std::any_of(queue_.begin(), queue_.end(), shares);
}

void StoreQueue::AwaitPrefix(std::span<const int32_t> tokens, uint64_t ns, size_t prefix,
                             std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  MutexLock l(&mu_);
  while (!StalledLocked() && SharesLocked(tokens, ns, prefix)) {
    const auto left = until - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) return;
    // Woken by the end of each put; a stall starting meanwhile is seen within 50 ms.
    cv_.WaitFor(&mu_, std::min<std::chrono::steady_clock::duration>(left, std::chrono::milliseconds(50)));
  }
}

bool StoreQueue::busy() const {
  MutexLock l(&mu_);
  return running_ || !queue_.empty();
}

void StoreQueue::Drain() {
  MutexLock l(&mu_);
  while (!queue_.empty() || running_) cv_.Wait(&mu_);
}

StoreBehindStats StoreQueue::stats() const {
  MutexLock l(&mu_);
  StoreBehindStats s = stats_;
  s.queued = queue_.size();
  s.queued_bytes = queued_bytes_;
  s.running_ms = running_ ? MsSince(started_) : 0;
  s.stalled = StalledLocked();
  return s;
}

void StoreQueue::Loop() {
  for (;;) {
    Job job;
    {
      MutexLock l(&mu_);
      while (queue_.empty() && !stop_) cv_.Wait(&mu_);
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= job.bytes();
      current_.tokens = job.tokens;
      current_.ns = job.ns;
      running_ = true;
      started_ = std::chrono::steady_clock::now();
    }
    store::KvInput in;
    in.first_row = job.first_row;
    in.cache_namespace = job.ns;
    for (size_t l = 0; l < job.k.size(); ++l) {
      in.k.emplace_back(job.k[l]);
      in.v.emplace_back(job.v[l]);
    }
    for (const auto& s : job.importance) in.importance.emplace_back(s);
    auto put = tiers_->Put(job.tokens, in);
    if (!put.ok()) {
      TIERKV_LOG(kWarn) << "serve: storing a prompt failed: " << put.status().ToString();
    }
    MutexLock l(&mu_);
    running_ = false;
    ++(put.ok() ? stats_.stored : stats_.failed);
    cv_.SignalAll();
  }
}

}  // namespace tierkv::engine

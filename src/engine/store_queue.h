// Prompts stored behind their requests (ServeOptions::store_behind): the
// `tierkv-store-w` thread takes each request's K/V (owned, moved in) from a
// bounded queue and puts it through the tiers, so that a slow or hung disk
// (a frozen file system, a dying device) holds this thread, never the
// caller's: a server's scheduler keeps answering from what is stored and
// by computing. When the disk is slow the work is dropped, not piled up:
// a put finding the queue at its byte bound, or the writer stalled (one
// put running longer than kStallMs), is not queued (counted; only later
// requests lose that reuse).
//
// Ownership: a queued Job owns its tokens and K/V; the thread owns the job
// it is putting. Thread safety: every call from any thread; mu_ guards the
// queue and the counters.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "remote/store_tiers.h"
#include "tierkv/engine.h"
#include "tierkv/mutex.h"

namespace tierkv::engine {

class StoreQueue {
 public:
  // A put running longer than this marks the writer stalled.
  static constexpr double kStallMs = 2000;

  struct Job {
    std::vector<int32_t> tokens;
    std::vector<std::string> k, v;                // per layer, rows first_row.. of the prompt
    std::vector<std::vector<float>> importance;   // per layer, or empty
    size_t first_row = 0;
    uint64_t ns = 0;
    uint64_t bytes() const;
  };

  // `tiers` must outlive the queue; `max_bytes`: the K/V queued at most.
  StoreQueue(remote::StoreTiers* tiers, uint64_t max_bytes);
  // Stops taking work, drops what is queued (counted) and joins the thread
  // after the put it is running (a hung disk holds this as it holds the put).
  ~StoreQueue();
  StoreQueue(const StoreQueue&) = delete;
  StoreQueue& operator=(const StoreQueue&) = delete;

  // Queues `job`; false (dropped, counted) when the queue is at its bound
  // or the writer is stalled.
  bool Enqueue(Job job) TIERKV_EXCLUDES(mu_);
  // Read-your-writes for a prompt: waits while a queued or running put of
  // namespace `ns` shares the prompt's first `prefix` tokens (the caller
  // passes its local match plus a chunk: a put that would add to it), for
  // at most `wait`; at once while the writer is stalled.
  void AwaitPrefix(std::span<const int32_t> tokens, uint64_t ns, size_t prefix,
                   std::chrono::milliseconds wait) TIERKV_EXCLUDES(mu_);
  // Whether a put is queued or running (a caller with nothing to wait for
  // skips AwaitPrefix and the lookup that sizes it).
  bool busy() const TIERKV_EXCLUDES(mu_);
  // Waits until nothing is queued or running (tests, benchmarks, shutdown).
  void Drain() TIERKV_EXCLUDES(mu_);
  StoreBehindStats stats() const TIERKV_EXCLUDES(mu_);

 private:
  void Loop();
  bool StalledLocked() const TIERKV_REQUIRES(mu_);
  bool SharesLocked(std::span<const int32_t> tokens, uint64_t ns, size_t prefix) const TIERKV_REQUIRES(mu_);

  remote::StoreTiers* const tiers_;
  const uint64_t max_bytes_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<Job> queue_ TIERKV_GUARDED_BY(mu_);
  uint64_t queued_bytes_ TIERKV_GUARDED_BY(mu_) = 0;
  bool running_ TIERKV_GUARDED_BY(mu_) = false;  // the thread is putting `current_`
  Job current_ TIERKV_GUARDED_BY(mu_);            // its tokens and namespace (K/V moved out)
  std::chrono::steady_clock::time_point started_ TIERKV_GUARDED_BY(mu_);
  bool stop_ TIERKV_GUARDED_BY(mu_) = false;
  StoreBehindStats stats_ TIERKV_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace tierkv::engine

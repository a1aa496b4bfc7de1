// The engine's load thread (`tierkv-load`) and its queue. Requests submit
// reads that do not need the compute thread (as-like's layer loads, probe
// keys, all-keys reads, spec's read ahead); the thread serves the nearest
// layer first, then in order of submission: a request submits every layer's
// reads at its start, and spec's read for layer l+1, submitted during layer
// l, must not wait behind them.
//
// A Fetch is one such read into buffers the request owns: the job fills
// them, then publishes `done` under the Fetch's mutex; nobody looks at the
// buffers before Await returned.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/io_counts.h"
#include "engine/timing.h"
#include "tierkv/status.h"
#include "tierkv/mutex.h"

namespace tierkv::engine {

struct Fetch {
  // Set before the job is submitted; read-only after.
  std::vector<int32_t> rows;  // spec: the predicted set (the rows read)
  double issued_ms = 0;
  // Filled by the job before `done`; read by the request after Await.
  std::string probe_keys, k, v;
  IoCounts io;
  Status status;
  double completed_ms = 0;

  Mutex mu;
  CondVar cv;
  bool done TIERKV_GUARDED_BY(mu) = false;
};

// Waits for a fetch; returns its status. Adds the wait to *wait_ms unless
// null (the caller times it).
Status Await(Fetch& f, double* wait_ms = nullptr);

class LoadQueue {
 public:
  LoadQueue() = default;
  ~LoadQueue();  // stops the thread after the queued jobs
  LoadQueue(const LoadQueue&) = delete;
  LoadQueue& operator=(const LoadQueue&) = delete;

  // Starts the `tierkv-load` thread (once).
  void Start();
  // Runs the queued jobs, then stops the thread (idempotent).
  void Stop();
  // A job serving `layer` (of whichever request). Before Start, jobs wait.
  void Submit(int layer, std::function<void()> job);
  // `read` on the load thread into a new Fetch (issued_ms, completed_ms
  // relative to t0). `read` gets the Fetch to fill and its counts.
  std::shared_ptr<Fetch> Read(Clock::time_point t0, int layer,
                              std::function<Status(Fetch&, IoCounts*)> read,
                              std::vector<int32_t> rows = {});
  // Runs queued jobs on the calling thread until none is left (tests).
  void TEST_Drain();

 private:
  struct Job {
    int layer = 0;
    uint64_t seq = 0;
    std::function<void()> fn;
  };
  void Loop();
  // Takes the next job (nearest layer, then oldest); false when none.
  bool PopLocked(std::function<void()>* job) TIERKV_REQUIRES(mu_);

  Mutex mu_;
  CondVar cv_;
  std::vector<Job> jobs_ TIERKV_GUARDED_BY(mu_);
  uint64_t next_seq_ TIERKV_GUARDED_BY(mu_) = 0;
  bool stop_ TIERKV_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tierkv::engine

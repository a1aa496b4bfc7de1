// A named thread that runs a task every interval until stopped (the
// engine's `tierkv-maint`: KV reordering every few minutes, as IMPRESS).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "tierkv/mutex.h"

namespace tierkv::engine {

class PeriodicTask {
 public:
  PeriodicTask() = default;
  ~PeriodicTask() { Stop(); }
  PeriodicTask(const PeriodicTask&) = delete;
  PeriodicTask& operator=(const PeriodicTask&) = delete;

  // Starts the thread `name` (at most 15 characters): `task` runs every
  // `every`, first after one interval.
  void Start(std::string name, std::chrono::milliseconds every, std::function<void()> task);
  // Wakes the thread and joins it; a running task finishes first.
  void Stop();

 private:
  Mutex mu_;
  CondVar cv_;
  bool stop_ TIERKV_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tierkv::engine

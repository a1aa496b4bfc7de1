#include "engine/periodic_task.h"

#include <pthread.h>

namespace tierkv::engine {

void PeriodicTask::Start(std::string name, std::chrono::milliseconds every,
                         std::function<void()> task) {
  thread_ = std::thread([this, name = std::move(name), every, task = std::move(task)] {
    pthread_setname_np(pthread_self(), name.c_str());
    for (;;) {
      {
        MutexLock l(&mu_);
        const auto until = std::chrono::steady_clock::now() + every;
        while (!stop_) {
          const auto left = until - std::chrono::steady_clock::now();
          if (left <= std::chrono::steady_clock::duration::zero()) break;
          cv_.WaitFor(&mu_, left);
        }
        if (stop_) return;
      }
      task();
    }
  });
}

void PeriodicTask::Stop() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

}  // namespace tierkv::engine

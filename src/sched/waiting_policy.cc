#include "sched/waiting_policy.h"

#include <deque>

#include "sched/car_policy.h"

namespace tierkv::sched {
namespace {

// Arrival order: jobs leave the queue only into free slots and start in
// the same round.
class FcfsPolicy final : public WaitingPolicy {
 public:
  size_t Room(size_t running, size_t max_running) const override {
    return max_running > running + held_.size() ? max_running - running - held_.size() : 0;
  }
  void Arrive(std::vector<std::shared_ptr<Job>> jobs) override {
    for (auto& job : jobs) held_.push_back(std::move(job));
  }
  // Room let in only jobs that have slots: each starts.
  std::optional<Release> Next(bool /*slot_free*/) override {
    if (held_.empty()) return std::nullopt;
    Release r{.job = std::move(held_.front())};
    held_.pop_front();
    return r;
  }
  size_t size() const override { return held_.size(); }
  void CancelAll() override {
    for (auto& job : held_) job->Cancel();
  }

 private:
  std::deque<std::shared_ptr<Job>> held_;  // within one round only
};

}  // namespace

std::unique_ptr<WaitingPolicy> MakeWaitingPolicy(SchedulerKind kind, engine::Engine* engine, size_t window,
                                                 bool prefetch) {
  switch (kind) {
    case SchedulerKind::kFcfs: return std::make_unique<FcfsPolicy>();
    case SchedulerKind::kCar: return std::make_unique<CarPolicy>(engine, window, prefetch);
  }
  return nullptr;
}

}  // namespace tierkv::sched

#include "sched/waiting_policy.h"

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
  std::vector<Release> Pick(size_t /*free_slots*/, bool /*past_deadline*/) override {
    std::vector<Release> out;
    for (auto& job : held_) out.push_back(Release{.job = std::move(job)});
    held_.clear();
    return out;
  }
  size_t size() const override { return held_.size(); }
  void CancelAll() override {
    for (auto& job : held_) job->Cancel();
  }

 private:
  std::vector<std::shared_ptr<Job>> held_;  // within one round only
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

// CaR's waiting policy (III-B): jobs enter a shuffled window (car_window.h)
// in arrival order and start from it by where their prefix K/V is (pools,
// then nothing stored, then disk); the timed prefetcher (prefetcher.h)
// loads a waiting disk job's prefix into the pools when the running jobs
// are about to free a slot. The pools' score events come from here: +1 on
// entry (moved when the prefix's stored chunks change), +1 on start (raised
// by the scheduler), -2 at the end (-1 for a job cancelled in the window).
//
// Owned and called by the scheduler thread alone, but for prefetch_stats.
#pragma once

#include <memory>
#include <vector>

#include "sched/car_window.h"
#include "sched/prefetcher.h"
#include "sched/waiting_policy.h"

namespace tierkv::sched {

class CarPolicy final : public WaitingPolicy {
 public:
  // The engine must outlive the policy; `prefetch` starts the prefetcher.
  CarPolicy(engine::Engine* engine, size_t window, bool prefetch);

  size_t Room(size_t running, size_t max_running) const override;
  bool keeps_waiting() const override { return true; }
  void Arrive(std::vector<std::shared_ptr<Job>> jobs) override;
  void BeginRound(bool slot_free) override;
  std::optional<Release> Next(bool slot_free) override;
  void AfterStarts(double slot_free_ms) override;
  size_t size() const override { return window_.size(); }
  void CancelAll() override;
  bool raises_events() const override { return true; }
  PrefetchStats prefetch_stats() const override;

 private:
  // Locates e's prefix again; its entry event moves if the chunks changed.
  void Locate(WindowEntry& e);
  Release Take(size_t i);

  engine::Engine* const engine_;
  CarWindow window_;
  std::unique_ptr<Prefetcher> prefetcher_;  // null without prefetch
};

}  // namespace tierkv::sched

#include "sched/car_policy.h"

#include <cmath>

namespace tierkv::sched {

CarPolicy::CarPolicy(engine::Engine* engine, size_t window, bool prefetch) : engine_(engine), window_(window) {
  if (prefetch) prefetcher_ = std::make_unique<Prefetcher>(engine_);
}

size_t CarPolicy::Room(size_t /*running*/, size_t /*max_running*/) const {
  return window_.capacity() > window_.size() ? window_.capacity() - window_.size() : 0;
}

void CarPolicy::Arrive(std::vector<std::shared_ptr<Job>> jobs) {
  for (auto& job : jobs) {
    WindowEntry e;
    e.job = std::move(job);
    e.where = engine_->Locate(e.job->params().prompt, e.job->params().cache_namespace);
    e.entered_as = e.where.place;
    engine_->OnSchedulerEvent(e.where, engine::SchedulerEvent::kEnterWindow);
    window_.Add(std::move(e));
  }
}

void CarPolicy::Locate(WindowEntry& e) {
  engine::PrefixLocation now = engine_->Locate(e.job->params().prompt, e.job->params().cache_namespace);
  if (now.score_keys != e.where.score_keys) {
    // Chunks stored since (or evicted): the window's +1 moves to them.
    engine_->OnSchedulerEvent(e.where, engine::SchedulerEvent::kLeaveWindow);
    engine_->OnSchedulerEvent(now, engine::SchedulerEvent::kEnterWindow);
  }
  e.where = std::move(now);
}

Release CarPolicy::Take(size_t i) {
  WindowEntry e = window_.Take(i);
  return Release{.job = std::move(e.job), .where = std::move(e.where), .entered_as = e.entered_as,
                 .located = true, .prefetched = e.prefetched};
}

void CarPolicy::BeginRound(bool slot_free) {
  // Located again only when it matters: a slot is free, or the prefetcher
  // is idle and will look for a disk entry.
  if (slot_free || (prefetcher_ && !prefetcher_->busy())) {
    for (auto& e : window_.entries()) {
      if (!e.job->cancelled()) Locate(e);
      e.loading = e.prefetched && prefetcher_ && prefetcher_->Loading(e.job.get());
    }
  }
}

std::optional<Release> CarPolicy::Next(bool slot_free) {
  // Cancelled jobs leave at once (their start ends them), whatever their place.
  for (size_t i = 0; i < window_.size(); ++i) {
    if (window_.entries()[i].job->cancelled()) return Take(i);
  }
  if (!slot_free || window_.empty()) return std::nullopt;
  return Take(window_.Pick());
}

void CarPolicy::AfterStarts(double slot_free_ms) {
  if (!prefetcher_ || window_.empty() || std::isinf(slot_free_ms) || prefetcher_->busy()) return;
  for (size_t i : window_.Order()) {
    WindowEntry& e = window_.entries()[i];
    if (e.prefetched || e.where.place != engine::PrefixPlace::kDisk) continue;
    if (prefetcher_->Due(slot_free_ms, e.where.disk_bytes) && prefetcher_->Submit(e.job)) e.prefetched = true;
    return;  // the first waiting disk job only: it starts first
  }
}

void CarPolicy::CancelAll() {
  for (auto& e : window_.entries()) e.job->Cancel();
}

PrefetchStats CarPolicy::prefetch_stats() const { return prefetcher_ ? prefetcher_->stats() : PrefetchStats{}; }

}  // namespace tierkv::sched

#include "sched/fair_queue.h"

#include <algorithm>
#include <string>

namespace tierkv::sched {

Status FairQueue::Push(std::shared_ptr<Job> job, size_t places, bool full,
                       std::shared_ptr<Job>* evicted) {
  const uint32_t tenant = job->params().tenant;
  const auto own = by_tenant_.find(tenant);
  const size_t held = own == by_tenant_.end() ? 0 : own->second.size();
  const size_t tenants = by_tenant_.size() + (held == 0 ? 1 : 0);
  const size_t share = std::max<size_t>(1, places / tenants);
  if (tenants > 1 && held >= share) {
    return Status::ResourceExhausted("this API key holds its share of the queue (" +
                                     std::to_string(share) +
                                     " requests) while other keys' requests wait");
  }
  if (full) {
    // The tenant holding most, if over its share, gives up its newest job.
    auto most = by_tenant_.end();
    for (auto it = by_tenant_.begin(); it != by_tenant_.end(); ++it) {
      if (it->first != tenant &&
          (most == by_tenant_.end() || it->second.size() > most->second.size()))
        most = it;
    }
    if (most == by_tenant_.end() || most->second.size() <= share) {
      return Status::ResourceExhausted("the queue is full (" + std::to_string(places) +
                                       " requests waiting)");
    }
    *evicted = std::move(most->second.back());
    most->second.pop_back();
    --size_;
  }
  by_tenant_[tenant].push_back(std::move(job));
  ++size_;
  return Status::Ok();
}

std::shared_ptr<Job> FairQueue::Take(std::map<uint32_t, size_t>& running, bool any) {
  auto best = by_tenant_.end();
  std::deque<std::shared_ptr<Job>>::iterator best_job;
  size_t best_running = 0;
  for (auto it = by_tenant_.begin(); it != by_tenant_.end(); ++it) {
    // The tenant's oldest job that may start (its remote lookups over).
    auto j = any ? it->second.begin()
                 : std::find_if(it->second.begin(), it->second.end(), [](const auto& job) { return job->ready(); });
    if (j == it->second.end()) continue;
    const size_t r = running[it->first];
    if (best == by_tenant_.end() || r < best_running ||
        (r == best_running && last_taken_[it->first] < last_taken_[best->first])) {
      best = it;
      best_job = j;
      best_running = r;
    }
  }
  if (best == by_tenant_.end()) return nullptr;
  last_taken_[best->first] = ++takes_;
  std::shared_ptr<Job> job = std::move(*best_job);
  best->second.erase(best_job);
  if (best->second.empty()) by_tenant_.erase(best);
  --size_;
  ++running[job->params().tenant];
  return job;
}

bool FairQueue::AnyReady() const {
  for (const auto& [tenant, jobs] : by_tenant_) {
    for (const auto& job : jobs) {
      if (job->ready()) return true;
    }
  }
  return false;
}

}  // namespace tierkv::sched

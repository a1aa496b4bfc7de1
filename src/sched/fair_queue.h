// The scheduler's queue, shared fairly between tenants (the API key a job
// came with: GenerationParams::tenant). Jobs leave it round-robin across
// tenants: the next to leave is the oldest job of the tenant with the
// fewest jobs running (ties: turns), so one key's backlog never delays another key's
// requests by more than one running job's time. A tenant may hold at most
// an equal share of the queue's places while other tenants wait; past it
// its own request is refused, and when the queue is full a tenant under
// its share takes the place of the newest job of the tenant holding most.
//
// Thread safety: none; the scheduler holds its lock around every call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>

#include "sched/job.h"
#include "tierkv/status.h"

namespace tierkv::sched {

class FairQueue {
 public:
  // Queues `job`. `places`: the queue's share-out (max_queue); `full`: no
  // job may be added without one leaving. ResourceExhausted (nothing
  // queued) when the job's tenant already holds its share, places /
  // (tenants waiting, counting its own), while another tenant waits, or
  // when the queue is full and no other tenant holds more than its share.
  // When full and another tenant does, that tenant's newest job leaves the
  // queue into *evicted (the caller ends it) and `job` is queued.
  Status Push(std::shared_ptr<Job> job, size_t places, bool full, std::shared_ptr<Job>* evicted);
  // The next job to leave: the oldest job that may start (Job::ready: its
  // remote lookups are over; with `any`, whether or not) of the tenant
  // with the fewest in `running` among those having one (ties: the tenant
  // that had a job leave least recently, so with equal counts tenants take
  // turns); that tenant's count in `running` is raised by one. Null when
  // none may start.
  std::shared_ptr<Job> Take(std::map<uint32_t, size_t>& running, bool any = false);
  // Whether a queued job may start.
  bool AnyReady() const;
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  // Each tenant's jobs in arrival order; no tenant with none.
  std::map<uint32_t, std::deque<std::shared_ptr<Job>>> by_tenant_;
  size_t size_ = 0;
  // When each tenant's last job left (takes_ then); 0: never. One entry
  // per tenant ever seen (the server's keys and none).
  std::map<uint32_t, uint64_t> last_taken_;
  uint64_t takes_ = 0;
};

}  // namespace tierkv::sched

// CaR's shuffled window (III-B1): a fixed number of waiting jobs at the
// head of the queue, started by the class of where their prefix K/V is
// (pools, then nothing stored, then disk: engine::PrefixPlace's order),
// oldest first within a class; a job whose prefetch is still running goes
// after the others (started now, it would read what the prefetch reads).
// A job that `capacity` younger jobs have
// passed starts next, whatever its class: no job waits forever behind
// better-placed newcomers. Owned and used by the scheduler thread alone.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "sched/job.h"
#include "tierkv/engine.h"

namespace tierkv::sched {

struct WindowEntry {
  std::shared_ptr<Job> job;
  engine::PrefixLocation where;       // located again every round
  engine::PrefixPlace entered_as = engine::PrefixPlace::kNone;  // at window entry
  uint64_t seq = 0;     // entry order (set by Add)
  size_t passed = 0;    // younger entries that started before this one
  bool prefetched = false;  // handed to the prefetcher (once per entry)
  bool loading = false;     // its prefetch is still running: started now, it would read
                            // the same rows beside it
};

class CarWindow {
 public:
  explicit CarWindow(size_t capacity) : capacity_(capacity) {}
  size_t capacity() const { return capacity_; }
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  bool full() const { return entries_.size() >= capacity_; }

  void Add(WindowEntry e);
  // The index of the entry to start next (the window is not empty).
  size_t Pick() const;
  // The entries in the order Pick would start them (by index).
  std::vector<size_t> Order() const;
  // Removes entry i; the older entries it passed count it.
  WindowEntry Take(size_t i);
  std::vector<WindowEntry>& entries() { return entries_; }

 private:
  // Whether a should start before b.
  bool Before(const WindowEntry& a, const WindowEntry& b) const;

  const size_t capacity_;
  uint64_t next_seq_ = 0;
  std::vector<WindowEntry> entries_;
};

}  // namespace tierkv::sched

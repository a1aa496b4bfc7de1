#include "sched/car_window.h"

#include <algorithm>
#include <numeric>

namespace tierkv::sched {

void CarWindow::Add(WindowEntry e) {
  e.seq = next_seq_++;
  e.passed = 0;
  entries_.push_back(std::move(e));
}

bool CarWindow::Before(const WindowEntry& a, const WindowEntry& b) const {
  const bool a_due = a.passed >= capacity_, b_due = b.passed >= capacity_;
  if (a_due != b_due) return a_due;
  if (!a_due && a.loading != b.loading) return b.loading;
  if (!a_due && a.where.place != b.where.place) return a.where.place < b.where.place;
  return a.seq < b.seq;
}

size_t CarWindow::Pick() const {
  size_t best = 0;
  for (size_t i = 1; i < entries_.size(); ++i) {
    if (Before(entries_[i], entries_[best])) best = i;
  }
  return best;
}

std::vector<size_t> CarWindow::Order() const {
  std::vector<size_t> order(entries_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [this](size_t a, size_t b) { return Before(entries_[a], entries_[b]); });
  return order;
}

WindowEntry CarWindow::Take(size_t i) {
  WindowEntry e = std::move(entries_[i]);
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
  for (WindowEntry& o : entries_) {
    if (o.seq < e.seq) ++o.passed;
  }
  return e;
}

}  // namespace tierkv::sched

#include "store/run_table.h"

#include <set>
#include <utility>

namespace tierkv::store {

const std::shared_ptr<const Run>& RunTable::Of(uint32_t chunk) const {
  static const std::shared_ptr<const Run> kNone;
  auto it = of_.find(chunk);
  return it == of_.end() ? kNone : it->second;
}

void RunTable::Install(std::shared_ptr<const Run> run) {
  for (uint32_t c : run->chunks) {
    of_[c] = run;
    ++chunks_;
  }
  bytes_ += run->bytes;
}

std::shared_ptr<const Run> RunTable::Remove(uint32_t chunk) {
  auto it = of_.find(chunk);
  if (it == of_.end()) return nullptr;
  std::shared_ptr<const Run> run = it->second;
  for (uint32_t c : run->chunks) {
    auto jt = of_.find(c);
    if (jt != of_.end() && jt->second == run) {
      of_.erase(jt);
      --chunks_;
    }
  }
  bytes_ -= run->bytes;
  return run;
}

bool RunTable::Replace(const Run* old, std::shared_ptr<const Run> copy) {
  auto it = of_.find(copy->chunks[0]);
  if (it == of_.end() || it->second.get() != old) return false;
  bytes_ += copy->bytes - old->bytes;
  for (uint32_t c : copy->chunks) of_[c] = copy;
  return true;
}

std::vector<std::shared_ptr<const Run>> RunTable::Runs() const {
  std::vector<std::shared_ptr<const Run>> runs;
  std::set<const Run*> seen;
  for (const auto& [c, run] : of_) {
    if (seen.insert(run.get()).second) runs.push_back(run);
  }
  return runs;
}

}  // namespace tierkv::store

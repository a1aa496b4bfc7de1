// The store's reordered runs beside its chunk table (store/reorder.cc
// writes them): each installed run under every chunk it packs, and the
// totals StoreStats reports. Not thread-safe: the store guards it with its
// index lock, as the chunk table.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "store/record_check.h"

namespace tierkv::store {

class RunTable {
 public:
  // The run that packs `chunk`, or null; a reference (no reference-count
  // traffic on the read path), valid until the table next changes.
  const std::shared_ptr<const Run>& Of(uint32_t chunk) const;
  // Puts `run` under each of its chunks; it has at least one (reorder and
  // the manifest never make an empty run), and none of them may be in
  // another run (Remove those first).
  void Install(std::shared_ptr<const Run> run);
  // Takes the run that packs `chunk` out from under all of its chunks and
  // returns it (null: the chunk is in none).
  std::shared_ptr<const Run> Remove(uint32_t chunk);
  // Puts `copy` (the same run, records moved by compaction) where `old` is;
  // false, and nothing changes, when `old` is no longer installed.
  bool Replace(const Run* old, std::shared_ptr<const Run> copy);
  // Each installed run once.
  std::vector<std::shared_ptr<const Run>> Runs() const;
  uint64_t bytes() const { return bytes_; }    // records of installed runs
  uint64_t chunks() const { return chunks_; }  // chunks in some run

 private:
  std::unordered_map<uint32_t, std::shared_ptr<const Run>> of_;
  uint64_t bytes_ = 0;
  uint64_t chunks_ = 0;
};

}  // namespace tierkv::store

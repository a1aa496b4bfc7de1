// The mapping list of a reordered run of chunks (IMPRESS 4.4.1).
//
// KV reordering stores a run of consecutive chunks' rows, per layer, in
// descending average importance, so that a selective read of the important
// rows touches few records and pages. The mapping list says, per layer, at
// which slot of the reordered layout each original row now lives (slot s is
// row s % C of reordered record s / C). Rows are relative to the run's first
// token. Reordering never crosses a radix node, so the run's rows are all
// shared by every prompt that reaches its last chunk.
//
// Thread safety: immutable after construction.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tierkv/status.h"

namespace tierkv::index {

class MappingList {
 public:
  // The most rows one list maps (slots are 16-bit: 2 bytes per row and layer).
  static constexpr uint32_t kMaxRows = 65536;

  MappingList() = default;

  // orders[l][slot] = the original row stored at `slot` in layer l (a
  // permutation of 0..rows-1). InvalidArgument when a layer's order is not a
  // permutation of the same number of rows, or there are more than kMaxRows.
  static Result<MappingList> FromOrders(const std::vector<std::vector<uint32_t>>& orders);

  // Order of rows by descending score (stable: ties keep token order), the
  // layout the reordering job writes. scores[r] of row r.
  static std::vector<uint32_t> OrderByScore(std::span<const float> scores);

  uint16_t layers() const { return layers_; }
  uint32_t rows() const { return rows_; }
  uint32_t SlotOf(uint16_t layer, uint32_t row) const {
    return slot_of_[size_t{layer} * rows_ + row];
  }
  // The original row at `slot` (inverse of SlotOf; computed, not stored).
  std::vector<uint32_t> RowsOf(uint16_t layer) const;
  bool IsIdentity(uint16_t layer) const;
  size_t MemoryBytes() const { return slot_of_.capacity() * sizeof(uint16_t); }

  bool operator==(const MappingList& o) const = default;

 private:
  uint16_t layers_ = 0;
  uint32_t rows_ = 0;
  std::vector<uint16_t> slot_of_;  // layer-major; slot - 0 fits 16 bits (rows <= 65536)
};

}  // namespace tierkv::index

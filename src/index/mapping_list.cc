#include "index/mapping_list.h"

#include <algorithm>
#include <numeric>

namespace tierkv::index {

Result<MappingList> MappingList::FromOrders(const std::vector<std::vector<uint32_t>>& orders) {
  MappingList m;
  if (orders.empty()) return Status::InvalidArgument("mapping list: no layers");
  if (orders.size() > UINT16_MAX) return Status::InvalidArgument("mapping list: too many layers");
  const size_t rows = orders[0].size();
  if (rows == 0 || rows > kMaxRows) {
    return Status::InvalidArgument("mapping list: " + std::to_string(rows) + " rows (1.." +
                                   std::to_string(kMaxRows) + ")");
  }
  m.layers_ = static_cast<uint16_t>(orders.size());
  m.rows_ = static_cast<uint32_t>(rows);
  m.slot_of_.assign(orders.size() * rows, 0);
  std::vector<bool> seen(rows);
  for (size_t l = 0; l < orders.size(); ++l) {
    if (orders[l].size() != rows) {
      return Status::InvalidArgument("mapping list: layer " + std::to_string(l) + " orders " +
                                     std::to_string(orders[l].size()) + " rows, layer 0 " +
                                     std::to_string(rows));
    }
    std::fill(seen.begin(), seen.end(), false);
    for (size_t slot = 0; slot < rows; ++slot) {
      const uint32_t row = orders[l][slot];
      if (row >= rows || seen[row]) {
        return Status::InvalidArgument("mapping list: layer " + std::to_string(l) +
                                       " is not a permutation (row " + std::to_string(row) + ")");
      }
      seen[row] = true;
      m.slot_of_[l * rows + row] = static_cast<uint16_t>(slot);
    }
  }
  return m;
}

std::vector<uint32_t> MappingList::OrderByScore(std::span<const float> scores) {
  std::vector<uint32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return scores[a] > scores[b]; });
  return order;
}

std::vector<uint32_t> MappingList::RowsOf(uint16_t layer) const {
  std::vector<uint32_t> out(rows_);
  for (uint32_t r = 0; r < rows_; ++r) out[SlotOf(layer, r)] = r;
  return out;
}

bool MappingList::IsIdentity(uint16_t layer) const {
  for (uint32_t r = 0; r < rows_; ++r) {
    if (SlotOf(layer, r) != r) return false;
  }
  return true;
}

}  // namespace tierkv::index

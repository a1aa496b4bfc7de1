#include "store/read_plan.h"

#include "store/format.h"

namespace tierkv::store {

void AddRowBlocks(uint64_t record, uint32_t row, uint32_t tokens, uint64_t row_bytes, bool k, bool v,
                  std::set<uint64_t>* blocks) {
  if (k) blocks->insert(record << 32 | (1 + row * row_bytes / kBlockSize));
  if (v) blocks->insert(record << 32 | (1 + (uint64_t{tokens} + row) * row_bytes / kBlockSize));
}

double PredictedSeconds(const std::set<uint64_t>& blocks, uint32_t merge_gap, const IoCostModel& model) {
  uint64_t read_blocks = 0;
  const auto runs = MergedRuns(blocks, merge_gap);
  for (const auto& [first, end] : runs) read_blocks += end - first;
  return model.Seconds(runs.size(), read_blocks * kBlockSize);
}

std::vector<std::pair<uint64_t, uint64_t>> RecordReads(const std::vector<bool>& pages, bool header_known,
                                                       uint32_t merge_gap) {
  std::vector<uint64_t> needed;
  if (!header_known) needed.push_back(0);
  for (size_t pg = 0; pg < pages.size(); ++pg) {
    if (pages[pg]) needed.push_back(1 + pg);
  }
  return MergedRuns(needed, merge_gap);
}

uint64_t PayloadPagesOf(const std::vector<std::pair<uint64_t, uint64_t>>& reads) {
  uint64_t pages = 0;
  for (const auto& [b, e] : reads) pages += e - b - (b == 0 ? 1 : 0);
  return pages;
}

}  // namespace tierkv::store

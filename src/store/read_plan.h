// The read planner's rules over plain values, testable without a store:
// which 4 KiB blocks a row needs, how a record's needed blocks become reads
// (gaps the cost model says are cheaper to read than to skip are read
// through), and what reading a set of blocks is predicted to cost.
// store/row_reads.cc takes what they need from the store under its lock
// (chunk sizes, run maps, known headers, the cost model) and applies them.
//
// Blocks of a record: block 0 is its header, payload page p is block p + 1;
// K rows first, then V rows (record tokens x row bytes each). A block key
// (record << 32) | block names a block of one of several records; keys of
// different records never merge (their distance exceeds any gap).
#pragma once

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "store/io_model.h"

namespace tierkv::store {

// [first, end) block ranges that fetch `blocks` (ascending: a sorted
// vector or a set); needed blocks separated by at most `gap` unneeded ones
// share a read.
template <typename Blocks>
std::vector<std::pair<uint64_t, uint64_t>> MergedRuns(const Blocks& blocks, uint64_t gap) {
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  for (uint64_t b : blocks) {
    if (!runs.empty() && b - runs.back().second <= gap) {
      runs.back().second = b + 1;
    } else {
      runs.emplace_back(b, b + 1);
    }
  }
  return runs;
}

// Adds the block keys of row `row` of record `record` (a record of
// `tokens` rows of `row_bytes`): its K block if `k`, its V block if `v`.
void AddRowBlocks(uint64_t record, uint32_t row, uint32_t tokens, uint64_t row_bytes, bool k, bool v,
                  std::set<uint64_t>* blocks);

// Predicted seconds of reading `blocks` (keys) as the planner reads them:
// runs merged across gaps of at most `merge_gap`, costed by `model`.
double PredictedSeconds(const std::set<uint64_t>& blocks, uint32_t merge_gap, const IoCostModel& model);

// The reads of one record: its header block unless `header_known`, and the
// payload pages marked in `pages`, merged across gaps of at most
// `merge_gap`. Block ranges, as MergedRuns.
std::vector<std::pair<uint64_t, uint64_t>> RecordReads(const std::vector<bool>& pages, bool header_known,
                                                       uint32_t merge_gap);

// Payload pages a record's reads fetch (its header block not counted).
uint64_t PayloadPagesOf(const std::vector<std::pair<uint64_t, uint64_t>>& reads);

}  // namespace tierkv::store

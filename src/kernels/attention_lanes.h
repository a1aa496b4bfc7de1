// Attention with 16 new tokens' queries across the lanes of an AVX-512
// register: the side kernel of a reuse request (tens of query rows over
// hundreds or thousands of supplied prefix rows) and, being faster there too,
// every prefill of two or more new tokens with head_dim 16, 32, 64 or 128.
//
// With queries in the lanes, a softmax row is a lane: its maximum, exp and
// sum are vertical operations with no reduction per row, each key's score
// is one broadcast-FMA per dimension, and each value row is added to 16
// outputs by one broadcast-FMA per dimension. Only the H2O column sums (a
// sum over queries, i.e. across lanes) need a horizontal reduction, done once
// per head for 16 keys at a time. Scores are kept in log2 units so the
// softmax is 2^x (no range reduction by ln 2), taken while the scores are
// in registers and not shifted by the max where that is exact (a check of
// each lane's sum; otherwise two passes). Numbers: docs/engine.md.
#pragma once

#include "kernels/attention.h"

namespace tierkv::kernels {

// Whether AttendLanes serves these arguments on this CPU: AVX-512, head_dim
// 16, 32, 64 or 128, and at least two new rows (one row is the row kernel's).
bool LanesServe(const AttentionArgs& args);

// Same contract as AttendKvGroup (results equal up to float rounding).
// REQUIRES: LanesServe(args).
void AttendLanes(const AttentionArgs& args, AttentionScratch* scratch);

}  // namespace tierkv::kernels

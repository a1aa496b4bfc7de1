// Causal attention of new tokens over (a) supplied prefix rows, in any order
// and any subset, and (b) the new tokens themselves, for one KV head and the
// query heads that share it (GQA group; group = 1 for MHA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tierkv/kv.h"

namespace tierkv::kernels {

struct AttentionArgs {
  int n_new = 0;     // new tokens (query rows)
  int head_dim = 0;
  int group = 1;     // query heads sharing this KV head
  // Query of head g of the group, row i: q[i*q_stride + g*head_dim + d] (after RoPE).
  const float* q = nullptr;
  size_t q_stride = 0;
  // The new tokens' own K and V for this KV head, row i at k_new + i*kv_new_stride.
  const float* k_new = nullptr;
  const float* v_new = nullptr;
  size_t kv_new_stride = 0;
  KvRows prefix;  // every row is visible to every new token
  // Output of head g, row i: out[i*out_stride + g*head_dim + d]. Null: only
  // the weights are wanted (colsum, sparsity counts): no values are read.
  float* out = nullptr;
  size_t out_stride = 0;
  // If set, colsum[g*prefix.count + j] += sum over new rows of the softmax
  // weight on prefix row j (H2O importance), in the order rows were given.
  float* colsum = nullptr;
  // If set, counts the causal attention weights (every query head of the
  // group, every new row): all of them into *weights, and those below 1% of
  // their row's maximum into *near_zero (CaR's measure of sparsity).
  uint64_t* weights = nullptr;
  uint64_t* near_zero = nullptr;
};

// Per-thread reusable buffers; not thread-safe, one per calling thread.
struct AttentionScratch {
  std::vector<float> kp, vp, scores;
};

void AttendKvGroup(const AttentionArgs& args, AttentionScratch* scratch);

// Converts `count` rows of head_dim elements from a view into dense fp32.
void GatherRows(const void* src, KvDType dtype, size_t count, size_t stride, int head_dim,
                float* dst);

}  // namespace tierkv::kernels

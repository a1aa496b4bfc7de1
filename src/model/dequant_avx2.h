// AVX2 block loops for DequantizeRow's commonest types (Q8_0, Q4_0, Q4_K,
// Q6_K): each value is computed with the portable loop's arithmetic in the
// same order and without FMA, so the results are bit for bit the portable
// ones (tests/model/weight_matrix_test.cc checks it). The caller checks the
// CPU (HasAvx2).
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/quant.h"

namespace tierkv::model {

// Whether the CPU has AVX2, FMA and F16C: what the AVX2 kernels need.
bool HasAvx2();
// Whether it runs AVX2 as two 128-bit halves with one vector multiply pipe
// (AMD Zen 1 and Zen+, which report themselves as znver1): a few kernels
// and the crossover table are chosen for it (quant_dot.h, crossover.h).
bool Avx2InHalves();
// Shared with the portable loops (quant.cc): an fp16 scale at p, and
// Q4_K/Q5_K's j-th 6-bit scale and min (ggml's get_scale_min_k4).
float F16(const uint8_t* p);
void ScaleMinK4(int j, const uint8_t* q, uint8_t* d, uint8_t* m);
// Q6_K's four 6-bit values (minus 32) at element l of a 128-element half:
// elements l, l + 32, l + 64 and l + 96 (ggml's dequantize_row_q6_K).
void Q6Values(const uint8_t* ql, const uint8_t* qh, int l, int q[4]);
// `blocks` blocks of type t at src into dst; false (nothing written) for a
// type without an AVX2 loop.
bool DequantizeBlocksAvx2(GgmlType t, const uint8_t* src, float* dst, size_t blocks);

}  // namespace tierkv::model

// Products in the weights' own type, for decode and short batches: the
// activations are quantized per block to 8 bits (Q8_0 beside Q4_0 and Q8_0
// weights, Q8_K beside the k-quants, as ggml pairs them) and multiplied
// against the weight blocks with integer dot products, so a product reads the
// file's bytes once and converts nothing to fp32. F16 and BF16 rows multiply
// fp32 activations directly (converted in registers).
//
// Why not dequantize-then-sgemm for a few rows: that converts every weight
// to fp32 per call (64% of a decode step's cycles on a 1.24 B-weight Q4_K
// model, issue 37) and hands sgemm a one-row product; here a token's traffic
// is the file's bytes. For many rows sgemm's blocking wins again
// (WeightMatrix picks by the number of rows, docs/engine.md).
//
// Kernels: AVX2 (maddubs/madd, FMA, F16C) where the CPU has it, else the
// portable loops, which are the reference: the integer sums are exact, so
// the two differ only in the order fp32 partial sums are added (tests bound
// it). Each product equals, up to that order, the sum over the row of
// dequantized weight × dequantized activation (tests/model/quant_dot_test.cc).
//
// Thread safety: all functions are pure; callers own every buffer.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "model/quant.h"

namespace tierkv::model {

// How activations are held for a product with weights of some type.
enum class ActFormat : uint8_t {
  kNone,  // no in-type product: dequantize and sgemm
  kF32,   // fp32 as given (F16, BF16 weights)
  kQ8_0,  // 32-element blocks {f16 d; int8 q[32]} (ggml's block_q8_0)
  kQ8_K,  // 256-element blocks {float d; int8 q[256]; int16 bsums[16]} (block_q8_K)
};

// The activation format weights of type t multiply against; kNone for a
// type without an in-type kernel (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, F32).
ActFormat ActivationFormat(GgmlType t);

// Products of up to this many activation rows with weights of type t run in
// type (WeightMatrix::MatMul); sgemm on dequantized tiles wins above it.
// 0 for a type without kernels. The crossover depends on how fast sgemm is
// next to the 8-bit kernels, so it is per kind of CPU, measured with
// `tierkv bench-engine --decode --product-rows ...` on an 8192 x 8192
// matrix, 2 threads (docs/engine.md):
// - with AVX-512 (an Intel CPU with VNNI, where sgemm runs at ~300 GFLOP/s):
//   16 rows for the 8-bit kernels (Q4_K: 16.7 against 31.2 ms at 16 rows, 70
//   against 40 at 64); F16's fp32 products lose from 4 rows on (16.7 against
//   11.3 ms at 4; F16C makes sgemm's tiles cheap), so they stop at 2; BF16's
//   at 16 (its tiles are converted by a portable loop), so they stop at 8;
// - AVX2 with 256-bit units, no AVX-512 (an AMD EPYC, Zen 3, where sgemm
//   peaks at ~135 GFLOP/s and dequantizing a tile costs as much as
//   multiplying it): in type up to 32 rows for Q4_0 (46.4 against 44.7 ms
//   at 32), 64 for Q8_0 and Q6_K (at 64 level: 92.4 | 90.1, 71.0 | 67.0;
//   at 32: 44.4 | 60.6, 32.7 | 42.7), 128
//   for Q4_K (78.7 against 87.4 at 64, level at 128) and 256 for Q5_K (308
//   against 361 at 256). With 16 there, a 19-token query after a reused
//   prefix dequantized every weight of the model (~800 ms on a 1B model).
//   Measured again on 2026-11-28 (same CPU): Q8_0 level at 48 rows and
//   behind at 64 (98-114 against 89-94 ms), so 48; F16 and BF16 in
//   registers up to 16 (F16: 10.5 against 28.4 ms at 4, 34.8 against 39.3
//   at 16, 144 against 87 at 64; BF16: 36.6 against 67.0 at 16). These
//   predate the folded Q4_K/Q5_K/Q6_K kernels (2026-11-29), which only
//   made the in-type side faster: unmeasured since on that CPU.
// - AVX2 run as two 128-bit halves (AMD EPYC 7001, Zen 1; its one 128-bit
//   integer multiply pipe bounds the 8-bit kernels at ~40-53 GFLOP/s on 2
//   cores, sgemm reaches ~60-68), with the kernels that fold two
//   sub-blocks into one madd: Q4_K in type up to 64 rows (in type /
//   dequantize-then-sgemm at 64 rows in 5 runs 0.75, 1.06, 0.91, 0.91,
//   0.91; at 128 0.77-1.06), Q6_K up to 32 (0.63-0.86 at 32 in 4 runs,
//   0.54-1.13 at 64); Q8_0 and Q4_0 up to 16 (at 16 53.5 | 57.0, 56.5 |
//   61.1 ms; at 24 sgemm ahead by 4-12%); Q5_K at 256 as on Zen 3 (168.7
//   | 188.8 at 64);
//   F16 up to 16 (43.9 | 56.5 at 16, 94.1 | 87.0 at 32), BF16 up to 32
//   (82.8 | 105.7 at 32). Measured 2026-11-29.
// Other CPUs with AVX-512 (Zen 4, Skylake without VNNI) take the first
// figures unmeasured, other AVX2 CPUs (Zen 2, Intel client cores) Zen 3's,
// Zen+ (also reported as znver1) Zen 1's. The rule is fixed per CPU rather
// than timed at load so that which products round their activations to 8
// bits, and so a row's logits, do not change between runs of one machine.
int InTypeMaxRows(GgmlType t);

// Bytes of one row of `cols` activations in format f (cols a multiple of
// its block: 32 for Q8_0, 256 for Q8_K).
size_t ActRowBytes(ActFormat f, int cols);

// One row of `cols` floats into format f at out (ActRowBytes bytes), with
// ggml's rounding: Q8_0's scale is max|x| / 127 stored as fp16, Q8_K's is
// -max / 127 for the value of largest magnitude, kept as fp32. A block
// holding a NaN or an infinity gets a NaN scale, so the products carry it
// as fp32 activations would (ggml's would round it away), and zeros.
// Values round to the nearest step, ties to even (ggml's x86 rounding),
// and lie in [-127, 127], never -128: the AVX2 kernels that give y the
// sign of a weight (Q8_0, Q4_0, Q6_K) rely on it (under the default
// rounding mode; the process never changes it).
// Runs the AVX2 quantizers where the CPU has them: the same bytes as the
// portable loops' (QuantizeActivationsPortable, the reference).
void QuantizeActivations(ActFormat f, const float* x, int cols, uint8_t* out);
void QuantizeActivationsPortable(ActFormat f, const float* x, int cols, uint8_t* out);
// The scales both quantizers (portable and AVX2) use, so the rules live
// once. Q8_0, for a finite block of largest magnitude amax: d = amax / 127
// (stored as fp16) and the multiplier 1/d, 0 where d is 0 or 1/d overflows
// (a block of denormals, whose products are zeros anyway).
struct Q8_0Scale {
  float d, inverse;
};
inline Q8_0Scale Q8_0ScaleOf(float amax) {
  const float d = amax / 127.f, inverse = 1.f / d;
  return {d, d != 0 && std::isfinite(inverse) ? inverse : 0.f};
}
// Q8_K, for a finite block whose value of largest magnitude is max: the
// multiplier -127 / max, or 0 for a block of zeros or denormals (then the
// block is all zeros with scale 0).
inline float Q8_KInverseOf(float max) {
  const float inverse = -127.f / max;
  return max != 0 && std::isfinite(inverse) ? inverse : 0.f;
}
// The AVX2 quantizers of one row (model/quant_dot_avx2.cc); the caller
// checks HasAvx2().
void QuantizeQ8_0Avx2(const float* x, int cols, uint8_t* out);
void QuantizeQ8_KAvx2(const float* x, int cols, uint8_t* out);

// C[m·ldc + r] = Σ_k W[r][k] · A[m][k] + beta · C[m·ldc + r] for rows
// r ∈ [0, rows) of W (type t, `row_bytes` apart from w) and activation rows
// m ∈ [0, M) (ActivationFormat(t), act_stride bytes apart; for kF32 the rows
// are floats, act_stride bytes apart too). beta is 0 or 1.
void DotRows(GgmlType t, int cols, const uint8_t* w, size_t row_bytes, int rows, const uint8_t* act,
             size_t act_stride, int M, float beta, float* C, size_t ldc);
// The same with the portable loops only (the reference the tests compare to).
void DotRowsPortable(GgmlType t, int cols, const uint8_t* w, size_t row_bytes, int rows,
                     const uint8_t* act, size_t act_stride, int M, float beta, float* C, size_t ldc);

// The kernels in use on this CPU: "portable", "avx2", or "avx2, Q4_K and
// Q8_0 packed for avx512-vnni" (model/quant_pack.h).
const char* DotKernelName();

// One weight row against one activation row (the portable loops).
using DotFn = float (*)(const uint8_t* w, const uint8_t* act, int cols);
// The AVX2 kernels (model/quant_dot_avx2.cc): one weight row against 1, 2
// or 4 activation rows `stride` bytes apart (the weight blocks decoded once
// for all), sums to out[0..rows). Null for a type without them; the caller
// checks HasAvx2().
using RowsDotFn = void (*)(const uint8_t* w, const uint8_t* act, size_t stride, int cols, float* out);
struct MultiDot {
  RowsDotFn one, two, four;
};
const MultiDot* DotAvx2(GgmlType t);

}  // namespace tierkv::model

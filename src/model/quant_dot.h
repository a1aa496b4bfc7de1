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
  kQ8_1,  // 32-element blocks {f16 d; f16 s = d · Σq; int8 q[32]} (ggml's block_q8_1, beside Q4_1)
  kQ8_K,  // 256-element blocks {float d; int8 q[256]; int16 bsums[16]} (block_q8_K)
};
// How many ActFormat values there are: arrays indexed by format size by it.
inline constexpr size_t kActFormats = static_cast<size_t>(ActFormat::kQ8_K) + 1;

// The activation format weights of type t multiply against; kNone for a
// type without an in-type kernel (Q5_0, Q5_1, Q2_K, Q3_K, F32).
ActFormat ActivationFormat(GgmlType t);

// How many activation rows a product runs in type before sgemm takes over:
// InTypeMaxRows (model/crossover.h).

// Bytes of one row of `cols` activations in format f (cols a multiple of
// its block: 32 for Q8_0, 256 for Q8_K).
size_t ActRowBytes(ActFormat f, int cols);

// One row of `cols` floats into format f at out (ActRowBytes bytes), with
// ggml's rounding: Q8_0's scale is max|x| / 127 stored as fp16, Q8_K's is
// -max / 127 for the value of largest magnitude, kept as fp32. A block
// holding a NaN or an infinity gets a NaN scale, so the products carry it
// as fp32 activations would (ggml's would round it away), and zeros.
// Q8_1 is Q8_0 with s = d · Σq, d in fp32 before it is stored, s stored as
// fp16 (ggml's quantize_row_q8_1): Q4_1's minimum times the block's sum.
// As in ggml, s overflows fp16 (to ±inf) where a block's values sum past
// ~65,504 in magnitude, and the Q4_1 products are then infinite or NaN.
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
void QuantizeQ8_1Avx2(const float* x, int cols, uint8_t* out);
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

// The kernels in use on this CPU, with their revision: "portable",
// "avx2 r4", or "avx2 r4, Q4_K and Q8_0 packed for avx512-vnni"
// (model/quant_pack.h).
const char* DotKernelName();

// One weight row against one activation row (the portable loops).
using DotFn = float (*)(const uint8_t* w, const uint8_t* act, int cols);
// The AVX2 kernels (model/quant_dot_avx2.cc): one weight row against 1, 2
// or 4 activation rows `stride` bytes apart (the weight blocks decoded once
// for all), sums to out[0..rows). Null for a type without them; the caller
// checks HasAvx2(). `halves`: Q4_K's and Q5_K's one-row kernels in 128-bit
// registers, for a CPU that runs AVX2 as two 128-bit halves (Avx2InHalves;
// DotRows passes it; on full-width units it would take twice the
// instructions, not measured there); the other kernels are the same.
using RowsDotFn = void (*)(const uint8_t* w, const uint8_t* act, size_t stride, int cols, float* out);
struct MultiDot {
  RowsDotFn one, two, four;
};
const MultiDot* DotAvx2(GgmlType t, bool halves);

}  // namespace tierkv::model

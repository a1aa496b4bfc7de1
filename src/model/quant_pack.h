// Rows repacked eight at a time for products with the rows in vector lanes
// (llama.cpp's CPU backend repacks the same types the same way, in its own
// layouts): one 256-bit register holds 4 weights of each of 8 rows, so an
// AVX-512 VNNI vpdpbusd multiplies 8 rows by the same 4 activation bytes,
// and the per-block scales multiply 8 rows' sums at once. Against the file's
// layout (model/quant_dot_avx2.cc) a product does several times fewer vector
// operations per weight, and the weights decoded once serve 4 activation
// rows (docs/engine.md has the measurements).
//
// Q4_K, per group of 8 rows and 256-element super-block, 1,184 bytes
// (8 x 144 = 1,152 in the file): d[8] and dmin[8] as fp16; the 6-bit scales
// sc[sub-block 8][row 8] as bytes; the 6-bit mins as bytes in pairs of
// sub-blocks, m[i 4][row 8][2] = (min of 2i, min of 2i+1); then for
// sub-block j and quarter g (8 elements), 32 bytes: row r's 4 bytes hold
// elements 32j + 8g + k (low nibble) and 32j + 8g + 4 + k (high nibble).
//
// Q8_0, per group of 8 rows and 32-element block, 272 bytes (as in the
// file): d[8] as fp16; then for quarter k (4 elements), 32 bytes: row r's 4
// bytes are elements 4k .. 4k+3 plus 128 (vpdpbusd multiplies unsigned by
// signed bytes; the kernel subtracts 128 x the activations' block sum).
//
// Products with packed rows run in type whatever their number of activation
// rows: on an 8192 x 8192 matrix, 2 threads, they beat dequantize-then-sgemm
// from 1 to 4,096 rows (Q4_K 5.5 against 20.4 ms at 16 rows, 159 against
// 224 at 512, 1,587 against 1,835 at 4,096 in one run; `bench-engine
// --decode`, docs/engine.md).
//
// Groups follow each other, their blocks in order. The activations are the
// type's ActivationFormat (model/quant_dot.h): Q8_K beside Q4_K, Q8_0 beside
// Q8_0.
//
// Thread safety: pure functions over caller-owned buffers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/quant.h"

namespace tierkv::model {

constexpr int kPackRows = 8;
constexpr size_t kPackedQ4KBlockBytes = 16 + 16 + 64 + 64 + 1024;
constexpr size_t kPackedQ8_0BlockBytes = 16 + 256;

// True when this CPU runs the packed kernels (AVX-512 F, BW, VL and VNNI)
// and t has a packed layout (Q4_K, Q8_0).
bool HasPacked(GgmlType t);
// True when this CPU runs the packed kernels.
bool HasPackedKernels();

// Bytes of `rows` (a multiple of 8) rows of `cols` weights of type t, packed.
size_t PackedBytes(GgmlType t, int rows, int cols);
// Packs `rows` rows of type t (row_bytes apart at src) into dst.
void Pack(GgmlType t, const uint8_t* src, size_t row_bytes, int rows, int cols, uint8_t* dst);

// What the packed kernels of t read of each activation row beside its
// values (block sums, scales), computed once per product rather than once
// per thread's share of rows: PackedSideWords(t, cols) 32-bit words per row,
// M rows at out.
size_t PackedSideWords(GgmlType t, int cols);
void PackedSide(GgmlType t, const uint8_t* act, size_t act_stride, int M, int cols, uint32_t* out);

// C[m·ldc + r] = Σ_k W[r][k] · A[m][k] (+ C when beta is 1) for packed rows
// r ∈ [0, rows) (rows a multiple of 8, `packed` at the first one's group)
// and activation rows m ∈ [0, M), act_stride bytes apart, with `side` their
// PackedSide.
void DotRowsPacked(GgmlType t, int cols, const uint8_t* packed, int rows, const uint8_t* act, size_t act_stride,
                   const uint32_t* side, int M, float beta, float* C, size_t ldc);

}  // namespace tierkv::model

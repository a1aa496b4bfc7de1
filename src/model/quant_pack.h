// Q4_K rows repacked eight at a time for products with the rows in vector
// lanes (llama.cpp's CPU backend repacks Q4_K the same way, in its own
// layout): one 256-bit register holds 4 weights of each of 8 rows, so an
// AVX-512 VNNI dpbusd multiplies 8 rows by the same 4 activation bytes, and
// the sub-block scales multiply 8 rows' sums at once. Against the file's
// layout (model/quant_dot_avx2.cc) a decode step does 1.6x fewer vector
// operations per weight, and each further activation row half as many.
//
// Layout of one group of 8 rows, per 256-element super-block, 1,184 bytes
// (8 x 144 = 1,152 in the file): d[8] and dmin[8] as fp16; the 6-bit scales
// sc[sub-block 8][row 8] and mins m[8][8] as bytes; then for sub-block j and
// quarter g (8 elements), 32 bytes: row r's 4 bytes hold elements
// 32j + 8g + k (low nibble) and 32j + 8g + 4 + k (high nibble), k = 0..3.
// Groups follow each other, their super-blocks in order.
//
// Thread safety: pure functions over caller-owned buffers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tierkv::model {

constexpr int kPackRows = 8;
constexpr size_t kPackedQ4KBlockBytes = 16 + 16 + 64 + 64 + 1024;

// True when this CPU runs the packed kernels (AVX-512 F, BW, VL and VNNI).
bool HasPackedQ4K();

// Products of up to this many activation rows with packed rows run in type
// (in place of InTypeMaxRows(Q4_K)): on an 8192 x 8192 matrix, 2 threads,
// 20.6 ms against dequantize-then-sgemm's 25.1 at 32 rows, 30.3 against 33.5 at
// 48, 52.2 against 47.7 at 64 (`bench-engine --decode`, docs/engine.md).
constexpr int kPackedMaxRows = 48;

// Bytes of `rows` (a multiple of 8) rows of `cols` Q4_K weights, packed.
size_t PackedQ4KBytes(int rows, int cols);
// Packs `rows` Q4_K rows (row_bytes apart at src) into dst.
void PackQ4K(const uint8_t* src, size_t row_bytes, int rows, int cols, uint8_t* dst);

// C[m·ldc + r] = Σ_k W[r][k] · A[m][k] (+ C when beta is 1) for packed rows
// r ∈ [0, rows) (rows a multiple of 8, `packed` at the first one's group)
// and Q8_K activation rows m ∈ [0, M), act_stride bytes apart.
void DotRowsPackedQ4K(int cols, const uint8_t* packed, int rows, const uint8_t* act, size_t act_stride, int M,
                      float beta, float* C, size_t ldc);

}  // namespace tierkv::model

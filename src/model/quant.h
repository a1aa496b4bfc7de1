// GGML tensor types: F32, F16, BF16 and the block-quantized types of the
// GGUF specification (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; the 256-element
// k-quant super-blocks Q2_K..Q6_K). Dequantization follows ggml's
// dequantize_row_* bit for bit (same formulas, same fp16 scales), so a file
// gives the weights llama.cpp computes with. The quantizers are simple
// round-to-nearest ones (not llama.cpp's searches): they write valid blocks
// for test files and `tierkv convert --type`, nothing more.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tierkv/status.h"

namespace tierkv::model {

// ggml's block sizes: Q4_0/Q5_0/Q8_0 blocks of 32 elements (QK4_0, QK8_0),
// k-quant super-blocks of 256 (QK_K).
constexpr int kQK = 32, kQKK = 256;

enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kBF16 = 30,
};

struct GgmlTypeInfo {
  std::string_view name;  // as llama.cpp prints it: "Q4_K"
  uint32_t block_elems;   // elements per block (1 for F32/F16/BF16)
  uint32_t block_bytes;
};

// The type's layout; InvalidArgument naming the id when this build does not
// read it (e.g. IQ2_XXS, Q8_K).
Result<GgmlTypeInfo> TypeInfo(uint32_t type);
// By name (case-insensitive: "q4_k", "F16"); InvalidArgument listing them.
Result<GgmlType> ParseGgmlType(std::string_view name);

// Bytes of a row of n elements; n must be a multiple of the block size.
size_t RowBytes(GgmlType t, size_t n);

// n elements (a multiple of the block size) of type t at src into dst.
void DequantizeRow(GgmlType t, const uint8_t* src, float* dst, size_t n);
// The same without the AVX2 block loops (model/dequant_avx2.h), which must
// give its results bit for bit: tests compare the two.
void DequantizeRowPortable(GgmlType t, const uint8_t* src, float* dst, size_t n);
// The inverse for writing files: RowBytes(t, n) bytes appended to *out.
void QuantizeRow(GgmlType t, const float* src, size_t n, std::string* out);

}  // namespace tierkv::model

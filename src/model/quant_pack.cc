#include "model/quant_pack.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/fp16.h"
#include "model/dequant_avx2.h"

namespace tierkv::model {
namespace {

constexpr size_t kQ4KBytes = 144, kQ8KBytes = 292;

#define TIERKV_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

// Per activation row and block, what a packed kernel needs beside the
// quantized values, as 32-bit words (kSideWords of them per block).
// Q4_K: each 32-element sub-block's sum of Q8_K values as 8 int16
// (|sum| <= 32 x 128): word i is the pair (S_2i, S_2i+1).
constexpr int kQ4KSideWords = 4;
void SideQ4K(const uint8_t* block, uint32_t* out) {
  int16_t bs[16], s[8];
  std::memcpy(bs, block + 260, sizeof(bs));
  for (int j = 0; j < 8; ++j) s[j] = static_cast<int16_t>(bs[2 * j] + bs[2 * j + 1]);
  std::memcpy(out, s, sizeof(s));
}
// Q8_0: the block's scale as a float and 128 x the sum of its values.
constexpr int kQ8_0SideWords = 2;
void SideQ8_0(const uint8_t* block, uint32_t* out) {
  const float d = kernels::HalfToFloat(static_cast<uint16_t>(block[0] | block[1] << 8));
  int32_t sum = 0;
  for (int k = 0; k < 32; ++k) sum += static_cast<int8_t>(block[2 + k]);
  sum *= 128;
  std::memcpy(out, &d, 4);
  std::memcpy(out + 1, &sum, 4);
}

template <int MR>
TIERKV_VNNI void GroupQ4K(const uint8_t* g, int blocks, const uint8_t* act, size_t stride, const uint32_t* side,
                          size_t side_stride, float out[][kPackRows]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[MR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) acc[m] = _mm256_setzero_ps();
  for (int b = 0; b < blocks; ++b, g += kPackedQ4KBlockBytes) {
    const uint8_t* ya[MR];
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) ya[m] = act + m * stride + static_cast<size_t>(b) * kQ8KBytes + 4;
    __m256i sumi[MR], mins[MR];
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) sumi[m] = mins[m] = _mm256_setzero_si256();
    for (int i = 0; i < 4; ++i) {
      const __m256i mn = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 96 + 16 * i)));
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        const uint32_t pair = side[m * side_stride + kQ4KSideWords * b + i];
        mins[m] = _mm256_dpwssd_epi32(mins[m], mn, _mm256_set1_epi32(static_cast<int>(pair)));
      }
    }
    const uint8_t* q = g + 160;
    for (int j = 0; j < 8; ++j) {
      __m256i lo_s[MR], hi_s[MR];
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) lo_s[m] = hi_s[m] = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k, q += 32) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
        const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 8
        for (int m = 0; m < MR; ++m) {
          const uint8_t* y = ya[m] + 32 * j + 8 * k;
          int32_t y0, y1;
          std::memcpy(&y0, y, 4);
          std::memcpy(&y1, y + 4, 4);
          lo_s[m] = _mm256_dpbusd_epi32(lo_s[m], lo, _mm256_set1_epi32(y0));
          hi_s[m] = _mm256_dpbusd_epi32(hi_s[m], hi, _mm256_set1_epi32(y1));
        }
      }
      const __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + 32 + 8 * j)));
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        sumi[m] = _mm256_add_epi32(sumi[m], _mm256_mullo_epi32(_mm256_add_epi32(lo_s[m], hi_s[m]), sc));
      }
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16)));
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      float yd;
      std::memcpy(&yd, ya[m] - 4, 4);
      const __m256 dm = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(mins[m]));
      const __m256 t = _mm256_fmsub_ps(d, _mm256_cvtepi32_ps(sumi[m]), dm);
      acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(yd), t, acc[m]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) _mm256_storeu_ps(out[m], acc[m]);
}

// One group of 8 Q8_0 rows against MR activation rows: out[m][r]. side
// holds SideQ8_0 of each row's blocks. Two dot-product chains per row.
template <int MR>
TIERKV_VNNI void GroupQ8_0(const uint8_t* g, int blocks, const uint8_t* act, size_t stride, const uint32_t* side,
                           size_t side_stride, float out[][kPackRows]) {
  __m256 acc[MR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) acc[m] = _mm256_setzero_ps();
  for (int b = 0; b < blocks; ++b, g += kPackedQ8_0BlockBytes) {
    const uint8_t* ya[MR];
    __m256i s0[MR], s1[MR];
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      ya[m] = act + m * stride + static_cast<size_t>(b) * 34 + 2;
      s0[m] = s1[m] = _mm256_setzero_si256();
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; k += 2) {
      const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 16 + 32 * k));
      const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 48 + 32 * k));
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        int32_t y0, y1;
        std::memcpy(&y0, ya[m] + 4 * k, 4);
        std::memcpy(&y1, ya[m] + 4 * k + 4, 4);
        s0[m] = _mm256_dpbusd_epi32(s0[m], v0, _mm256_set1_epi32(y0));
        s1[m] = _mm256_dpbusd_epi32(s1[m], v1, _mm256_set1_epi32(y1));
      }
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g)));
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const uint32_t* w = side + m * side_stride + kQ8_0SideWords * b;
      float yd;
      std::memcpy(&yd, w, 4);
      const __m256i sum = _mm256_sub_epi32(_mm256_add_epi32(s0[m], s1[m]), _mm256_set1_epi32(static_cast<int>(w[1])));
      acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(yd)), _mm256_cvtepi32_ps(sum), acc[m]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) _mm256_storeu_ps(out[m], acc[m]);
}

using GroupFn = void (*)(const uint8_t*, int, const uint8_t*, size_t, const uint32_t*, size_t, float[][kPackRows]);

// A type's packed layout and kernels.
struct Packing {
  int block_elems;
  size_t act_block_bytes, packed_block_bytes;
  int side_words;
  void (*side)(const uint8_t* act_block, uint32_t* out);
  GroupFn group[3];  // 1, 2 and 4 activation rows
  void (*pack_group)(const uint8_t* src, size_t row_bytes, int blocks, uint8_t* dst);  // 8 rows
};

void PackQ4KGroup(const uint8_t* src, size_t row_bytes, int blocks, uint8_t* dst);
void PackQ8_0Group(const uint8_t* src, size_t row_bytes, int blocks, uint8_t* dst);

const Packing kQ4K{256, kQ8KBytes, kPackedQ4KBlockBytes, kQ4KSideWords, SideQ4K,
                   {GroupQ4K<1>, GroupQ4K<2>, GroupQ4K<4>}, PackQ4KGroup};
const Packing kQ8_0{32, 34, kPackedQ8_0BlockBytes, kQ8_0SideWords, SideQ8_0,
                    {GroupQ8_0<1>, GroupQ8_0<2>, GroupQ8_0<4>}, PackQ8_0Group};

const Packing* PackingOf(GgmlType t) {
  if (t == GgmlType::kQ4_K) return &kQ4K;
  if (t == GgmlType::kQ8_0) return &kQ8_0;
  return nullptr;
}

void PackQ4KGroup(const uint8_t* src, size_t row_bytes, int blocks, uint8_t* dst) {
  uint8_t q[256];  // one row's super-block, a weight per byte
  for (int b = 0; b < blocks; ++b, dst += kPackedQ4KBlockBytes) {
    for (int r = 0; r < kPackRows; ++r) {
      const uint8_t* x = src + static_cast<size_t>(r) * row_bytes + static_cast<size_t>(b) * kQ4KBytes;
      std::memcpy(dst + 2 * r, x, 2);           // d
      std::memcpy(dst + 16 + 2 * r, x + 2, 2);  // dmin
      // Mins of sub-blocks 2i and 2i+1 side by side: row r's pair at 96 + 16i + 2r.
      for (int j = 0; j < 8; ++j) {
        ScaleMinK4(j, x + 4, &dst[32 + 8 * j + r], &dst[96 + 16 * (j / 2) + 2 * r + j % 2]);
      }
      // Sub-blocks 2i and 2i+1 are the low and high nibbles of qs[32i .. 32i+32).
      for (int i = 0; i < 4; ++i) {
        for (int e = 0; e < 32; ++e) {
          q[64 * i + e] = x[16 + 32 * i + e] & 0x0F;
          q[64 * i + 32 + e] = x[16 + 32 * i + e] >> 4;
        }
      }
      for (int j = 0; j < 8; ++j) {
        for (int k4 = 0; k4 < 4; ++k4) {
          uint8_t* out = dst + 160 + 32 * (4 * j + k4) + 4 * r;
          const uint8_t* e = q + 32 * j + 8 * k4;
          for (int k = 0; k < 4; ++k) out[k] = static_cast<uint8_t>(e[k] | (e[4 + k] << 4));
        }
      }
    }
  }
}

void PackQ8_0Group(const uint8_t* src, size_t row_bytes, int blocks, uint8_t* dst) {
  for (int b = 0; b < blocks; ++b, dst += kPackedQ8_0BlockBytes) {
    for (int r = 0; r < kPackRows; ++r) {
      const uint8_t* x = src + static_cast<size_t>(r) * row_bytes + static_cast<size_t>(b) * 34;
      std::memcpy(dst + 2 * r, x, 2);
      for (int k = 0; k < 8; ++k) {
        for (int e = 0; e < 4; ++e) dst[16 + 32 * k + 4 * r + e] = static_cast<uint8_t>(x[2 + 4 * k + e] ^ 0x80);
      }
    }
  }
}

// One group of 8 rows against activation rows [m0, m1), 4 at a time:
// C[m·ldc + l] for its rows l.
void DotGroup(const Packing& p, const uint8_t* g, int blocks, const uint8_t* act, size_t act_stride,
              const uint32_t* side, size_t side_stride, int m0, int m1, float beta, float* C, size_t ldc) {
  float out[4][kPackRows];
  for (int m = m0; m < m1;) {
    const int n = m1 - m >= 4 ? 4 : m1 - m >= 2 ? 2 : 1;
    p.group[n / 2](g, blocks, act + static_cast<size_t>(m) * act_stride, act_stride, side + m * side_stride,
                   side_stride, out);
    for (int i = 0; i < n; ++i) {
      float* c = C + static_cast<size_t>(m + i) * ldc;
      for (int l = 0; l < kPackRows; ++l) c[l] = beta == 0.f ? out[i][l] : c[l] + out[i][l];
    }
    m += n;
  }
}

}  // namespace

bool HasPackedKernels() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
                          HasAvx2();
  return has;
}

bool HasPacked(GgmlType t) { return PackingOf(t) != nullptr && HasPackedKernels(); }

size_t PackedBytes(GgmlType t, int rows, int cols) {
  const Packing* p = PackingOf(t);
  if (p == nullptr) return 0;
  return static_cast<size_t>(rows / kPackRows) * static_cast<size_t>(cols / p->block_elems) * p->packed_block_bytes;
}

void Pack(GgmlType t, const uint8_t* src, size_t row_bytes, int rows, int cols, uint8_t* dst) {
  const Packing* p = PackingOf(t);
  const int blocks = cols / p->block_elems;
  const size_t group_bytes = static_cast<size_t>(blocks) * p->packed_block_bytes;
  for (int g0 = 0; g0 < rows; g0 += kPackRows, dst += group_bytes) {
    p->pack_group(src + static_cast<size_t>(g0) * row_bytes, row_bytes, blocks, dst);
  }
}

size_t PackedSideWords(GgmlType t, int cols) {
  const Packing& p = *PackingOf(t);
  return static_cast<size_t>(cols / p.block_elems) * p.side_words;
}

void PackedSide(GgmlType t, const uint8_t* act, size_t act_stride, int M, int cols, uint32_t* out) {
  const Packing& p = *PackingOf(t);
  const int blocks = cols / p.block_elems;
  for (int m = 0; m < M; ++m) {
    for (int b = 0; b < blocks; ++b, out += p.side_words) {
      p.side(act + static_cast<size_t>(m) * act_stride + static_cast<size_t>(b) * p.act_block_bytes, out);
    }
  }
}

void DotRowsPacked(GgmlType t, int cols, const uint8_t* packed, int rows, const uint8_t* act, size_t act_stride,
                   const uint32_t* side, int M, float beta, float* C, size_t ldc) {
  const Packing& p = *PackingOf(t);
  const int blocks = cols / p.block_elems;
  const size_t group_bytes = static_cast<size_t>(blocks) * p.packed_block_bytes;
  const size_t side_stride = PackedSideWords(t, cols);
  // Activation rows kChunkRows at a time (their bytes stay in cache while
  // every group passes over them: all of a 4,096-row product at once ran
  // slower than sgemm), 4 of them against each group of weights.
  constexpr int kChunkRows = 256;
  for (int m0 = 0; m0 < M; m0 += kChunkRows) {
    const int m1 = std::min(M, m0 + kChunkRows);
    const uint8_t* g = packed;
    for (int r = 0; r < rows; r += kPackRows, g += group_bytes) {
      DotGroup(p, g, blocks, act, act_stride, side, side_stride, m0, m1, beta, C + r, ldc);
    }
  }
}

}  // namespace tierkv::model

#include "model/quant_pack.h"

#include <immintrin.h>

#include <cstring>

#include "model/dequant_avx2.h"

namespace tierkv::model {
namespace {

constexpr size_t kQ4KBytes = 144, kQ8KBytes = 292;

#define TIERKV_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

// One group of 8 rows against MR activation rows: out[m][r].
template <int MR>
TIERKV_VNNI void Group(const uint8_t* g, int blocks, const uint8_t* act, size_t stride, float out[][kPackRows]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = _mm256_setzero_ps();
  for (int b = 0; b < blocks; ++b, g += kPackedQ4KBlockBytes) {
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16)));
    const uint8_t* ya[MR];
    for (int m = 0; m < MR; ++m) ya[m] = act + m * stride + static_cast<size_t>(b) * kQ8KBytes;
    __m256i sumi[MR], mins[MR];
    for (int m = 0; m < MR; ++m) sumi[m] = mins[m] = _mm256_setzero_si256();
    const uint8_t* q = g + 160;
    for (int j = 0; j < 8; ++j) {
      __m256i s[MR];
      for (int m = 0; m < MR; ++m) s[m] = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k, q += 32) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
        const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        for (int m = 0; m < MR; ++m) {
          const uint8_t* y = ya[m] + 4 + 32 * j + 8 * k;
          int32_t y0, y1;
          std::memcpy(&y0, y, 4);
          std::memcpy(&y1, y + 4, 4);
          s[m] = _mm256_dpbusd_epi32(s[m], lo, _mm256_set1_epi32(y0));
          s[m] = _mm256_dpbusd_epi32(s[m], hi, _mm256_set1_epi32(y1));
        }
      }
      const __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + 32 + 8 * j)));
      const __m256i mn = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + 96 + 8 * j)));
      for (int m = 0; m < MR; ++m) {
        int16_t bs[2];
        std::memcpy(bs, ya[m] + 260 + 4 * j, 4);
        sumi[m] = _mm256_add_epi32(sumi[m], _mm256_mullo_epi32(s[m], sc));
        mins[m] = _mm256_add_epi32(mins[m], _mm256_mullo_epi32(mn, _mm256_set1_epi32(bs[0] + bs[1])));
      }
    }
    for (int m = 0; m < MR; ++m) {
      float yd;
      std::memcpy(&yd, ya[m], 4);
      const __m256 vyd = _mm256_set1_ps(yd);
      acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(d, vyd), _mm256_cvtepi32_ps(sumi[m]), acc[m]);
      acc[m] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, vyd), _mm256_cvtepi32_ps(mins[m]), acc[m]);
    }
  }
  for (int m = 0; m < MR; ++m) _mm256_storeu_ps(out[m], acc[m]);
}

}  // namespace

bool HasPackedQ4K() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
                          HasAvx2();
  return has;
}

size_t PackedQ4KBytes(int rows, int cols) {
  return static_cast<size_t>(rows / kPackRows) * static_cast<size_t>(cols / 256) * kPackedQ4KBlockBytes;
}

void PackQ4K(const uint8_t* src, size_t row_bytes, int rows, int cols, uint8_t* dst) {
  const int blocks = cols / 256;
  uint8_t q[256];  // one row's super-block, a weight per byte
  for (int g0 = 0; g0 < rows; g0 += kPackRows) {
    for (int b = 0; b < blocks; ++b, dst += kPackedQ4KBlockBytes) {
      for (int r = 0; r < kPackRows; ++r) {
        const uint8_t* x = src + static_cast<size_t>(g0 + r) * row_bytes + static_cast<size_t>(b) * kQ4KBytes;
        std::memcpy(dst + 2 * r, x, 2);           // d
        std::memcpy(dst + 16 + 2 * r, x + 2, 2);  // dmin
        for (int j = 0; j < 8; ++j) ScaleMinK4(j, x + 4, &dst[32 + 8 * j + r], &dst[96 + 8 * j + r]);
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
}

void DotRowsPackedQ4K(int cols, const uint8_t* packed, int rows, const uint8_t* act, size_t act_stride, int M,
                      float beta, float* C, size_t ldc) {
  const int blocks = cols / 256;
  const size_t group_bytes = static_cast<size_t>(blocks) * kPackedQ4KBlockBytes;
  float out[4][kPackRows];
  for (int r = 0; r < rows; r += kPackRows, packed += group_bytes) {
    for (int m = 0; m < M;) {
      const int n = M - m >= 4 ? 4 : M - m >= 2 ? 2 : 1;
      const uint8_t* a = act + static_cast<size_t>(m) * act_stride;
      if (n == 4) {
        Group<4>(packed, blocks, a, act_stride, out);
      } else if (n == 2) {
        Group<2>(packed, blocks, a, act_stride, out);
      } else {
        Group<1>(packed, blocks, a, act_stride, out);
      }
      for (int i = 0; i < n; ++i) {
        float* c = C + static_cast<size_t>(m + i) * ldc + r;
        for (int l = 0; l < kPackRows; ++l) c[l] = beta == 0.f ? out[i][l] : c[l] + out[i][l];
      }
      m += n;
    }
  }
}

}  // namespace tierkv::model

#include "model/dequant_avx2.h"

#include <cpuid.h>
#include <immintrin.h>

namespace tierkv::model {
namespace {

#define TIERKV_AVX2 __attribute__((target("avx2")))

// 8 bytes at p as floats, unsigned or signed.
TIERKV_AVX2 inline __m256 U8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
TIERKV_AVX2 inline __m256 I8x8(const void* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p))));
}

// y = q * d (ggml: y[j] = qs[j] * d).
TIERKV_AVX2 void Q8_0(const uint8_t* b, float* y) {
  const __m256 d = _mm256_set1_ps(F16(b));
  for (int j = 0; j < 32; j += 8) _mm256_storeu_ps(y + j, _mm256_mul_ps(I8x8(b + 2 + j), d));
}

// y = (nibble - 8) * d: low nibbles are elements 0-15, high ones 16-31.
TIERKV_AVX2 void Q4_0(const uint8_t* b, float* y) {
  const __m256 d = _mm256_set1_ps(F16(b));
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
  const __m128i m = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  alignas(16) int8_t q[32];
  _mm_store_si128(reinterpret_cast<__m128i*>(q), _mm_sub_epi8(_mm_and_si128(v, m), eight));
  _mm_store_si128(reinterpret_cast<__m128i*>(q + 16), _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), m), eight));
  for (int j = 0; j < 32; j += 8) _mm256_storeu_ps(y + j, _mm256_mul_ps(I8x8(q + j), d));
}


// y = (d * sc) * nibble - (min * m), per 32 elements.
TIERKV_AVX2 void Q4_K(const uint8_t* b, float* y) {
  const float d = F16(b), min = F16(b + 2);
  const uint8_t* ql = b + 16;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  alignas(32) uint8_t q[64];
  for (int j = 0; j < 4; ++j, ql += 32, y += 64) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
    _mm256_store_si256(reinterpret_cast<__m256i*>(q), _mm256_and_si256(v, m4));
    _mm256_store_si256(reinterpret_cast<__m256i*>(q + 32), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
    for (int h = 0; h < 2; ++h) {
      uint8_t sc, m;
      ScaleMinK4(2 * j + h, b + 4, &sc, &m);
      const __m256 dl = _mm256_set1_ps(d * sc), ml = _mm256_set1_ps(min * m);
      for (int l = 0; l < 32; l += 8) {
        _mm256_storeu_ps(y + 32 * h + l, _mm256_sub_ps(_mm256_mul_ps(dl, U8x8(q + 32 * h + l)), ml));
      }
    }
  }
}

// y = (d * sc) * q with q = 4 low bits from ql, 2 high bits from qh, minus 32.
TIERKV_AVX2 void Q6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = F16(b + 208);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
  alignas(32) int8_t q[128];
  for (int n = 0; n < 2; ++n, y += 128, ql += 64, qh += 32, sc += 8) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
    const __m256i parts[4] = {
        _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30)),
        _mm256_or_si256(_mm256_and_si256(c, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_and_si256(h, m30)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4), _mm256_and_si256(_mm256_srli_epi16(h, 2), m30)),
    };
    for (int k = 0; k < 4; ++k) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(q + 32 * k), _mm256_sub_epi8(parts[k], k32));
    }
    for (int k = 0; k < 4; ++k) {
      for (int half = 0; half < 2; ++half) {
        const __m256 ds = _mm256_set1_ps(d * sc[half + 2 * k]);
        for (int l = 16 * half; l < 16 * half + 16; l += 8) {
          _mm256_storeu_ps(y + 32 * k + l, _mm256_mul_ps(ds, I8x8(q + 32 * k + l)));
        }
      }
    }
  }
}

}  // namespace

bool HasAvx2() {
  // Every AVX2 kernel here and in quant_dot_avx2.cc is compiled for
  // avx2, fma and f16c (fp16 scales converted in registers): all three.
  // (F16C through cpuid: clang's __builtin_cpu_supports does not name it.)
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
    return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return has;
}

bool Avx2InHalves() {
  static const bool halves = HasAvx2() && !__builtin_cpu_supports("avx512f") && __builtin_cpu_is("znver1");
  return halves;
}

bool DequantizeBlocksAvx2(GgmlType t, const uint8_t* src, float* dst, size_t blocks) {
  void (*f)(const uint8_t*, float*) = nullptr;
  switch (t) {
    case GgmlType::kQ8_0: f = Q8_0; break;
    case GgmlType::kQ4_0: f = Q4_0; break;
    case GgmlType::kQ4_K: f = Q4_K; break;
    case GgmlType::kQ6_K: f = Q6_K; break;
    default: return false;
  }
  const GgmlTypeInfo info = *TypeInfo(static_cast<uint32_t>(t));
  for (size_t i = 0; i < blocks; ++i) f(src + i * info.block_bytes, dst + i * info.block_elems);
  return true;
}

}  // namespace tierkv::model

#undef TIERKV_AVX2  // file-local (unity batches put other files after this one)

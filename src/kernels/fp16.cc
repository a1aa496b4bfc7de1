#include "kernels/fp16.h"

#include <cpuid.h>
#include <immintrin.h>

#include <cstring>

namespace tierkv::kernels {
namespace {

uint32_t AsBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float HalfToFloatSoft(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return FromBits(sign);
    // Subnormal: value = mant * 2^-24.
    float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  if (exp == 31) return FromBits(sign | 0x7f800000u | (mant << 13));
  return FromBits(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t FloatToHalfSoft(float f) {
  const uint32_t x = AsBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // Inf or NaN
    return sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0);
  }
  if (absx >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: overflow
  if (absx < 0x38800000u) {                         // below the smallest normal half
    // In units of 2^-24 (the half subnormal step), rounded to even; 1024
    // becomes the smallest normal, which is the right encoding.
    float v = FromBits(absx) * 16777216.0f;
    uint32_t r = static_cast<uint32_t>(__builtin_nearbyintf(v));
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t mant = absx & 0x7fffffu;
  uint32_t exp = (absx >> 23) - 112;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carries into exp correctly
  return sign | static_cast<uint16_t>(h);
}

bool HasF16C() {
  // CPUID leaf 1: ECX bit 29 is F16C (clang's __builtin_cpu_supports does not know it).
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
  }();
  return has;
}

__attribute__((target("avx,f16c"))) void HalfToFloatF16C(const uint16_t* in, float* out,
                                                         size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = HalfToFloatSoft(in[i]);
}

// As HalfToFloatF16C over rows `in_stride` apart, in one call.
__attribute__((target("avx,f16c"))) void HalfToFloatRowsF16C(const uint16_t* in, size_t in_stride,
                                                             size_t rows, size_t width, float* out) {
  for (size_t r = 0; r < rows; ++r, in += in_stride, out += width) {
    size_t i = 0;
    for (; i + 8 <= width; i += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    }
    for (; i < width; ++i) out[i] = HalfToFloatSoft(in[i]);
  }
}

__attribute__((target("avx,f16c"))) void FloatToHalfF16C(const float* in, uint16_t* out,
                                                         size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 f = _mm256_loadu_ps(in + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) out[i] = FloatToHalfSoft(in[i]);
}

}  // namespace

float HalfToFloat(uint16_t h) { return HalfToFloatSoft(h); }
uint16_t FloatToHalf(float f) { return FloatToHalfSoft(f); }

void HalfToFloatN(const uint16_t* in, float* out, size_t n) {
  if (HasF16C()) return HalfToFloatF16C(in, out, n);
  for (size_t i = 0; i < n; ++i) out[i] = HalfToFloatSoft(in[i]);
}

void HalfToFloatRows(const uint16_t* in, size_t in_stride, size_t rows, size_t width, float* out) {
  if (in_stride == width) return HalfToFloatN(in, out, rows * width);
  if (HasF16C()) return HalfToFloatRowsF16C(in, in_stride, rows, width, out);
  for (size_t r = 0; r < rows; ++r, in += in_stride, out += width) {
    for (size_t i = 0; i < width; ++i) out[i] = HalfToFloatSoft(in[i]);
  }
}

void FloatToHalfN(const float* in, uint16_t* out, size_t n) {
  if (HasF16C()) return FloatToHalfF16C(in, out, n);
  for (size_t i = 0; i < n; ++i) out[i] = FloatToHalfSoft(in[i]);
}

}  // namespace tierkv::kernels

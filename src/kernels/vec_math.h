// Elementwise math written so that the compiler vectorizes it.
#pragma once

#include <cstdint>
#include <bit>

namespace tierkv::kernels {

// e^x with relative error below 2e-7 for x in [-87, 88]; smaller x gives
// e^-87 (about 1.6e-38), which is zero for softmax purposes. Branch-free so
// that loops over it vectorize (std::exp does not).
inline float FastExp(float x) {
  // fmaxf/fminf rather than ?: : GCC if-converts them into vmaxps/vminps.
  x = __builtin_fminf(__builtin_fmaxf(x, -87.0f), 88.0f);
  const float t = x * 1.44269504088896341f;
  // Round to nearest with the 1.5*2^23 trick (valid for |t| < 2^22).
  const float n = (t + 12582912.0f) - 12582912.0f;
  const float f = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;
  // Taylor series of e^f on |f| <= 0.347, to degree 7.
  float p = 1.0f / 5040.0f;
  p = p * f + 1.0f / 720.0f;
  p = p * f + 1.0f / 120.0f;
  p = p * f + 1.0f / 24.0f;
  p = p * f + 1.0f / 6.0f;
  p = p * f + 0.5f;
  p = p * f + 1.0f;
  p = p * f + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);  // 2^n
}

}  // namespace tierkv::kernels

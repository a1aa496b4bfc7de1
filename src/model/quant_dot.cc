// Activation quantizers, the portable dot products (the reference) and the
// dispatch to the AVX2 ones (model/quant_dot.h). Block layouts: model/quant.cc.
#include "model/quant_dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/fp16.h"
#include "model/dequant_avx2.h"
#include "model/quant_pack.h"

namespace tierkv::model {
namespace {

constexpr size_t kQ8_0Bytes = 2 + kQK;                // f16 d, 32 × int8
constexpr size_t kQ8_1Bytes = 4 + kQK;                // f16 d, f16 s, 32 × int8
constexpr size_t kQ8_KBytes = 4 + kQKK + 2 * 16;      // float d, 256 × int8, 16 × int16

// ggml's nearest_int: round half to even through the float's mantissa.
int NearestInt(float f) {
  const float v = f + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

bool AllFinite(const float* x, int n) {
  for (int j = 0; j < n; ++j) {
    if (!std::isfinite(x[j])) return false;
  }
  return true;
}

// One block of 32 as Q8_0 and Q8_1 hold it: the fp16 scale at d, the
// values at q. Returns Q8_1's s, fp16 of d · Σq with d the fp32 scale
// before it was stored (ggml's quantize_row_q8_1). A NaN or infinity stays
// one in the products (as fp32 activations would carry it), instead of
// rounding to zeros: d and s NaN, the values zeros.
uint16_t QuantizeBlock8(const float* x, uint8_t* d, int8_t* q) {
  if (!AllFinite(x, kQK)) {
    const uint16_t h = kernels::FloatToHalf(std::numeric_limits<float>::quiet_NaN());
    std::memcpy(d, &h, 2);
    std::memset(q, 0, kQK);
    return h;
  }
  float amax = 0;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  const Q8_0Scale sc = Q8_0ScaleOf(amax);
  const uint16_t h = kernels::FloatToHalf(sc.d);
  std::memcpy(d, &h, 2);
  // Ties to even, as ggml's AVX2 quantizer rounds (its portable one
  // rounds them away from zero).
  int sum = 0;
  for (int j = 0; j < kQK; ++j) {
    q[j] = static_cast<int8_t>(NearestInt(x[j] * sc.inverse));
    sum += q[j];
  }
  return kernels::FloatToHalf(static_cast<float>(sum) * sc.d);
}

void QuantizeQ8_0(const float* x, int cols, uint8_t* out) {
  for (int b = 0; b < cols / kQK; ++b, x += kQK, out += kQ8_0Bytes) {
    QuantizeBlock8(x, out, reinterpret_cast<int8_t*>(out + 2));
  }
}

void QuantizeQ8_1(const float* x, int cols, uint8_t* out) {
  for (int b = 0; b < cols / kQK; ++b, x += kQK, out += kQ8_1Bytes) {
    const uint16_t s = QuantizeBlock8(x, out, reinterpret_cast<int8_t*>(out + 4));
    std::memcpy(out + 2, &s, 2);
  }
}

void QuantizeQ8_K(const float* x, int cols, uint8_t* out) {
  for (int b = 0; b < cols / kQKK; ++b, x += kQKK, out += kQ8_KBytes) {
    auto* q = reinterpret_cast<int8_t*>(out + 4);
    int16_t sums[16] = {};
    float d = 0, amax = 0, max = 0;
    for (int j = 0; j < kQKK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float iscale = Q8_KInverseOf(max);
    if (!AllFinite(x, kQKK)) {  // as in Q8_0: the products become NaN
      std::memset(q, 0, kQKK);
      d = std::numeric_limits<float>::quiet_NaN();
    } else if (iscale != 0) {
      for (int j = 0; j < kQKK; ++j) q[j] = static_cast<int8_t>(std::min(127, NearestInt(iscale * x[j])));
      for (int j = 0; j < kQKK; ++j) sums[j / 16] = static_cast<int16_t>(sums[j / 16] + q[j]);
      d = 1.f / iscale;
    } else {
      std::memset(q, 0, kQKK);
    }
    std::memcpy(out, &d, 4);
    std::memcpy(out + 4 + kQKK, sums, sizeof(sums));
  }
}

// ---- portable dot products: one weight row · one activation row ----

float DotQ8_0(const uint8_t* w, const uint8_t* a, int cols) {
  float sum = 0;
  for (int b = 0; b < cols / kQK; ++b, w += 34, a += kQ8_0Bytes) {
    const auto* x = reinterpret_cast<const int8_t*>(w + 2);
    const auto* y = reinterpret_cast<const int8_t*>(a + 2);
    int s = 0;
    for (int j = 0; j < kQK; ++j) s += x[j] * y[j];
    sum += static_cast<float>(s) * (F16(w) * F16(a));
  }
  return sum;
}

float DotQ4_0(const uint8_t* w, const uint8_t* a, int cols) {
  float sum = 0;
  for (int b = 0; b < cols / kQK; ++b, w += 18, a += kQ8_0Bytes) {
    const auto* y = reinterpret_cast<const int8_t*>(a + 2);
    int s = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      s += ((w[2 + j] & 0x0F) - 8) * y[j] + ((w[2 + j] >> 4) - 8) * y[j + kQK / 2];
    }
    sum += static_cast<float>(s) * (F16(w) * F16(a));
  }
  return sum;
}

// Q4_1 {f16 d, m; u8 qs[16]} against Q8_1: d·dy·Σ q·y + m·s per block.
float DotQ4_1(const uint8_t* w, const uint8_t* a, int cols) {
  float sum = 0;
  for (int b = 0; b < cols / kQK; ++b, w += 20, a += kQ8_1Bytes) {
    const auto* y = reinterpret_cast<const int8_t*>(a + 4);
    int s = 0;
    for (int j = 0; j < kQK / 2; ++j) s += (w[4 + j] & 0x0F) * y[j] + (w[4 + j] >> 4) * y[j + kQK / 2];
    sum += static_cast<float>(s) * (F16(w) * F16(a)) + F16(w + 2) * F16(a + 2);
  }
  return sum;
}

// Q4_K and Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins; Q5_K adds a
// fifth bit from qh (bit j of qh[l] for sub-block j's element l).
float DotQ45_K(const uint8_t* w, const uint8_t* a, int cols, bool five) {
  const size_t bytes = five ? 176 : 144;
  float sum = 0;
  for (int b = 0; b < cols / kQKK; ++b, w += bytes, a += kQ8_KBytes) {
    float yd;
    std::memcpy(&yd, a, 4);
    const auto* y = reinterpret_cast<const int8_t*>(a + 4);
    int16_t bsums[16];
    std::memcpy(bsums, a + 4 + kQKK, sizeof(bsums));
    const uint8_t* qh = w + 16;
    const uint8_t* qs = w + 16 + (five ? 32 : 0);
    int sumi = 0, mins = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      ScaleMinK4(j, w + 4, &sc, &m);
      mins += m * (bsums[2 * j] + bsums[2 * j + 1]);
      const uint8_t* q = qs + 32 * (j / 2);
      int s = 0;
      for (int l = 0; l < 32; ++l) {
        int v = (j % 2 == 0) ? (q[l] & 0x0F) : (q[l] >> 4);
        if (five && ((qh[l] >> j) & 1)) v += 16;
        s += v * y[32 * j + l];
      }
      sumi += sc * s;
    }
    sum += yd * F16(w) * static_cast<float>(sumi) - yd * F16(w + 2) * static_cast<float>(mins);
  }
  return sum;
}

float DotQ6_K(const uint8_t* w, const uint8_t* a, int cols) {
  float sum = 0;
  for (int b = 0; b < cols / kQKK; ++b, w += 210, a += kQ8_KBytes) {
    float yd;
    std::memcpy(&yd, a, 4);
    const auto* y = reinterpret_cast<const int8_t*>(a + 4);
    const uint8_t* ql = w;
    const uint8_t* qh = w + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(w + 192);
    int sumi = 0;
    for (int n = 0; n < 2; ++n, ql += 64, qh += 32, sc += 8, y += 128) {
      int s[8] = {};  // per 16 elements, in scale order
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        int q[4];
        Q6Values(ql, qh, l, q);
        s[is + 0] += q[0] * y[l];
        s[is + 2] += q[1] * y[l + 32];
        s[is + 4] += q[2] * y[l + 64];
        s[is + 6] += q[3] * y[l + 96];
      }
      for (int k = 0; k < 8; ++k) sumi += sc[k] * s[k];
    }
    sum += yd * F16(w + 208) * static_cast<float>(sumi);
  }
  return sum;
}

// F16 or BF16 weights against fp32 activations.
template <bool kBf16>
float DotHalf(const uint8_t* w, const uint8_t* a, int cols) {
  const auto* x = reinterpret_cast<const float*>(a);
  float sum = 0;
  for (int k = 0; k < cols; ++k) {
    uint16_t h;
    std::memcpy(&h, w + 2 * k, 2);
    float f;
    if (kBf16) {
      const uint32_t bits = static_cast<uint32_t>(h) << 16;
      std::memcpy(&f, &bits, 4);
    } else {
      f = kernels::HalfToFloat(h);
    }
    sum += f * x[k];
  }
  return sum;
}

float DotQ4_K(const uint8_t* w, const uint8_t* a, int cols) { return DotQ45_K(w, a, cols, false); }
float DotQ5_K(const uint8_t* w, const uint8_t* a, int cols) { return DotQ45_K(w, a, cols, true); }

DotFn DotPortable(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0: return DotQ4_0;
    case GgmlType::kQ4_1: return DotQ4_1;
    case GgmlType::kQ8_0: return DotQ8_0;
    case GgmlType::kQ4_K: return DotQ4_K;
    case GgmlType::kQ5_K: return DotQ5_K;
    case GgmlType::kQ6_K: return DotQ6_K;
    case GgmlType::kF16: return DotHalf<false>;
    case GgmlType::kBF16: return DotHalf<true>;
    default: return nullptr;
  }
}

// Every weight row against every activation row: with `f`, 4, 2 or 1
// activation rows per call (the weight blocks decoded once for them), else
// one at a time through the portable `one`.
void RunDots(const MultiDot* f, DotFn one, int cols, const uint8_t* w, size_t row_bytes, int rows,
             const uint8_t* act, size_t act_stride, int M, float beta, float* C, size_t ldc) {
  float sums[4];
  for (int r = 0; r < rows; ++r, w += row_bytes) {
    for (int m = 0; m < M;) {
      const uint8_t* a = act + static_cast<size_t>(m) * act_stride;
      const int n = f == nullptr ? 1 : M - m >= 4 ? 4 : M - m >= 2 ? 2 : 1;
      if (f == nullptr) {
        sums[0] = one(w, a, cols);
      } else {
        (n == 4 ? f->four : n == 2 ? f->two : f->one)(w, a, act_stride, cols, sums);
      }
      for (int i = 0; i < n; ++i) {
        float& c = C[static_cast<size_t>(m + i) * ldc + r];
        c = beta == 0.f ? sums[i] : c + sums[i];
      }
      m += n;
    }
  }
}

}  // namespace

ActFormat ActivationFormat(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0: return ActFormat::kQ8_0;
    case GgmlType::kQ4_1: return ActFormat::kQ8_1;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: return ActFormat::kQ8_K;
    case GgmlType::kF16:
    case GgmlType::kBF16: return ActFormat::kF32;
    default: return ActFormat::kNone;
  }
}

size_t ActRowBytes(ActFormat f, int cols) {
  switch (f) {
    case ActFormat::kF32: return static_cast<size_t>(cols) * sizeof(float);
    case ActFormat::kQ8_0: return static_cast<size_t>(cols / kQK) * kQ8_0Bytes;
    case ActFormat::kQ8_1: return static_cast<size_t>(cols / kQK) * kQ8_1Bytes;
    case ActFormat::kQ8_K: return static_cast<size_t>(cols / kQKK) * kQ8_KBytes;
    case ActFormat::kNone: break;
  }
  return 0;
}

void QuantizeActivationsPortable(ActFormat f, const float* x, int cols, uint8_t* out) {
  switch (f) {
    case ActFormat::kF32: std::memcpy(out, x, static_cast<size_t>(cols) * sizeof(float)); break;
    case ActFormat::kQ8_0: QuantizeQ8_0(x, cols, out); break;
    case ActFormat::kQ8_1: QuantizeQ8_1(x, cols, out); break;
    case ActFormat::kQ8_K: QuantizeQ8_K(x, cols, out); break;
    case ActFormat::kNone: break;
  }
}

void QuantizeActivations(ActFormat f, const float* x, int cols, uint8_t* out) {
  if (HasAvx2()) {
    if (f == ActFormat::kQ8_0) return QuantizeQ8_0Avx2(x, cols, out);
    if (f == ActFormat::kQ8_1) return QuantizeQ8_1Avx2(x, cols, out);
    if (f == ActFormat::kQ8_K) return QuantizeQ8_KAvx2(x, cols, out);
  }
  QuantizeActivationsPortable(f, x, cols, out);
}

void DotRowsPortable(GgmlType t, int cols, const uint8_t* w, size_t row_bytes, int rows,
                     const uint8_t* act, size_t act_stride, int M, float beta, float* C, size_t ldc) {
  RunDots(nullptr, DotPortable(t), cols, w, row_bytes, rows, act, act_stride, M, beta, C, ldc);
}

void DotRows(GgmlType t, int cols, const uint8_t* w, size_t row_bytes, int rows, const uint8_t* act,
             size_t act_stride, int M, float beta, float* C, size_t ldc) {
  RunDots(HasAvx2() ? DotAvx2(t, Avx2InHalves()) : nullptr, DotPortable(t), cols, w, row_bytes, rows, act,
          act_stride, M, beta, C, ldc);
}

// "r2": Q8_0/Q4_0 four blocks a step; "r3": Q4_K/Q5_K fold a sub-block
// pair by unpacking (both 2026-11-29); "r4": Q4_1 in type (2026-12-07). The revision moves when
// a kernel's speed changes enough to move a crossover, so that a crossover
// file measured with the older kernels is refused (model/crossover.h).
const char* DotKernelName() {
  if (!HasAvx2()) return "portable";
  return HasPackedKernels() ? "avx2 r4, Q4_K and Q8_0 packed for avx512-vnni" : "avx2 r4";
}

}  // namespace tierkv::model

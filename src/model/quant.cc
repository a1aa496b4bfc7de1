// Block layouts and (de)quantization of the GGML tensor types
// (model/quant.h). Layouts, from the GGUF specification / ggml-common.h:
//   Q4_0  {f16 d; u8 qs[16]}                      32 elems, 18 B
//   Q4_1  {f16 d, m; u8 qs[16]}                   32 elems, 20 B
//   Q5_0  {f16 d; u8 qh[4]; u8 qs[16]}            32 elems, 22 B
//   Q5_1  {f16 d, m; u8 qh[4]; u8 qs[16]}         32 elems, 24 B
//   Q8_0  {f16 d; i8 qs[32]}                      32 elems, 34 B
//   Q2_K  {u8 scales[16]; u8 qs[64]; f16 d, dmin}            256, 84 B
//   Q3_K  {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}    256, 110 B
//   Q4_K  {f16 d, dmin; u8 scales[12]; u8 qs[128]}           256, 144 B
//   Q5_K  {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]} 256, 176 B
//   Q6_K  {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}      256, 210 B
#include "model/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/fp16.h"
#include "model/dequant_avx2.h"

namespace tierkv::model {

float F16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return kernels::HalfToFloat(h);
}

// The j-th 6-bit scale and min of Q4_K/Q5_K (ggml's get_scale_min_k4).
void ScaleMinK4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void Q6Values(const uint8_t* ql, const uint8_t* qh, int l, int q[4]) {
  q[0] = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
  q[1] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
  q[2] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
  q[3] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
}

namespace {

struct Known {
  GgmlType type;
  GgmlTypeInfo info;
};
constexpr Known kTypes[] = {
    {GgmlType::kF32, {"F32", 1, 4}},       {GgmlType::kF16, {"F16", 1, 2}},
    {GgmlType::kBF16, {"BF16", 1, 2}},     {GgmlType::kQ4_0, {"Q4_0", kQK, 18}},
    {GgmlType::kQ4_1, {"Q4_1", kQK, 20}},  {GgmlType::kQ5_0, {"Q5_0", kQK, 22}},
    {GgmlType::kQ5_1, {"Q5_1", kQK, 24}},  {GgmlType::kQ8_0, {"Q8_0", kQK, 34}},
    {GgmlType::kQ2_K, {"Q2_K", kQKK, 84}}, {GgmlType::kQ3_K, {"Q3_K", kQKK, 110}},
    {GgmlType::kQ4_K, {"Q4_K", kQKK, 144}}, {GgmlType::kQ5_K, {"Q5_K", kQKK, 176}},
    {GgmlType::kQ6_K, {"Q6_K", kQKK, 210}},
};

void PutF16(float f, std::string* out) {
  const uint16_t h = kernels::FloatToHalf(f);
  out->append(reinterpret_cast<const char*>(&h), 2);
}
// ggml's fp16 round trip of a scale: what the block will hold.
float AsF16(float f) { return kernels::HalfToFloat(kernels::FloatToHalf(f)); }

// ---- dequantization (ggml's dequantize_row_*) ----

void DeqQ4_0(const uint8_t* b, float* y) {
  const float d = F16(b);
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = ((b[2 + j] & 0x0F) - 8) * d;
    y[j + kQK / 2] = ((b[2 + j] >> 4) - 8) * d;
  }
}
void DeqQ4_1(const uint8_t* b, float* y) {
  const float d = F16(b), m = F16(b + 2);
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = (b[4 + j] & 0x0F) * d + m;
    y[j + kQK / 2] = (b[4 + j] >> 4) * d + m;
  }
}
// Q5_0 (has_min false) and Q5_1: the fifth bits in qh.
void DeqQ5(const uint8_t* b, float* y, bool has_min) {
  const float d = F16(b), m = has_min ? F16(b + 2) : 0.f;
  const uint8_t* p = b + (has_min ? 4 : 2);
  uint32_t qh;
  std::memcpy(&qh, p, 4);
  const uint8_t* qs = p + 4;
  for (int j = 0; j < kQK / 2; ++j) {
    const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
    const int x0 = (qs[j] & 0x0F) | h0, x1 = (qs[j] >> 4) | h1;
    y[j] = has_min ? x0 * d + m : (x0 - 16) * d;
    y[j + kQK / 2] = has_min ? x1 * d + m : (x1 - 16) * d;
  }
}
void DeqQ8_0(const uint8_t* b, float* y) {
  const float d = F16(b);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<int8_t>(b[2 + j]) * d;
}
void DeqQ2_K(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = F16(b + 80), min = F16(b + 82);
  int is = 0;
  for (int n = 0; n < kQKK; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = scales[is++];
        const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * ((q[l + 16 * half] >> shift) & 3) - ml;
      }
    }
  }
}
// Q3_K's sixteen 6-bit scales from their 12 bytes (low 4 bits in bytes
// 0-7, high 2 bits in bytes 8-11), minus 32.
void Q3Scales(const uint8_t* s, int8_t* out) {
  for (int j = 0; j < 16; ++j) {
    const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = static_cast<int8_t>((lo | (hi << 4)) - 32);
  }
}
void DeqQ3_K(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  int8_t scales[16];
  Q3Scales(b + 96, scales);
  const float d_all = F16(b + 108);
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < kQKK; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d_all * scales[is++];
        for (int l = 0; l < 16; ++l) {
          const int k = l + 16 * half;
          *y++ = dl * (((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4));
        }
      }
    }
  }
}
// Q4_K (qh null) and Q5_K.
void DeqQ45_K(const uint8_t* b, float* y, bool five) {
  const float d = F16(b), min = F16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = five ? b + 16 : nullptr;
  const uint8_t* ql = b + (five ? 48 : 16);
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < kQKK; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
    uint8_t sc, m;
    ScaleMinK4(is, scales, &sc, &m);
    const float d1 = d * sc, m1 = min * m;
    ScaleMinK4(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = min * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh && (qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh && (qh[l] & u2) ? 16 : 0)) - m2;
  }
}
void DeqQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = F16(b + 208);
  for (int n = 0; n < kQKK; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      int q[4];
      Q6Values(ql, qh, l, q);
      y[l] = d * sc[is] * q[0];
      y[l + 32] = d * sc[is + 2] * q[1];
      y[l + 64] = d * sc[is + 4] * q[2];
      y[l + 96] = d * sc[is + 6] * q[3];
    }
  }
}

// ---- quantization (round to nearest; valid blocks, not llama.cpp's search) ----

int Nearest(float v) { return static_cast<int>(std::lround(v)); }

// Q4_0, Q5_0 (bits 4 or 5, symmetric) and Q8_0 (bits 8).
void QuantSym(const float* x, int bits, std::string* out) {
  float amax = 0, max = 0;
  for (int j = 0; j < kQK; ++j) {
    if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
  }
  if (bits == 8) {
    const float d = AsF16(amax / 127), id = d ? 1 / d : 0;
    PutF16(d, out);
    for (int j = 0; j < kQK; ++j) out->push_back(static_cast<char>(std::clamp(Nearest(x[j] * id), -127, 127)));
    return;
  }
  const int half = 1 << (bits - 1);  // 8 or 16
  const float d = AsF16(max / -half), id = d ? 1 / d : 0;
  PutF16(d, out);
  uint8_t q[kQK];
  for (int j = 0; j < kQK; ++j) q[j] = static_cast<uint8_t>(std::clamp(Nearest(x[j] * id) + half, 0, 2 * half - 1));
  if (bits == 5) {
    uint32_t qh = 0;
    for (int j = 0; j < kQK; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    out->append(reinterpret_cast<const char*>(&qh), 4);
  }
  for (int j = 0; j < kQK / 2; ++j) out->push_back(static_cast<char>((q[j] & 0xF) | ((q[j + kQK / 2] & 0xF) << 4)));
}
// Q4_1 and Q5_1: scale and minimum.
void QuantAffine(const float* x, int bits, std::string* out) {
  const float mn = *std::min_element(x, x + kQK), mx = *std::max_element(x, x + kQK);
  const int levels = (1 << bits) - 1;
  const float d = AsF16((mx - mn) / levels), m = AsF16(mn), id = d ? 1 / d : 0;
  PutF16(d, out);
  PutF16(m, out);
  uint8_t q[kQK];
  for (int j = 0; j < kQK; ++j) q[j] = static_cast<uint8_t>(std::clamp(Nearest((x[j] - m) * id), 0, levels));
  if (bits == 5) {
    uint32_t qh = 0;
    for (int j = 0; j < kQK; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    out->append(reinterpret_cast<const char*>(&qh), 4);
  }
  for (int j = 0; j < kQK / 2; ++j) out->push_back(static_cast<char>((q[j] & 0xF) | ((q[j + kQK / 2] & 0xF) << 4)));
}

// A sub-block's scale and (non-negative) min for levels 0..nmax: x ~ s*q - m.
void SubScaleMin(const float* x, int n, int nmax, float* s, float* m) {
  const float mn = std::min(0.f, *std::min_element(x, x + n)), mx = *std::max_element(x, x + n);
  *s = mx > mn ? (mx - mn) / nmax : 0.f;
  *m = -mn;
}

void QuantQ2_K(const float* x, std::string* out) {
  float s[16], m[16], ms = 0, mm = 0;
  for (int j = 0; j < 16; ++j) {
    SubScaleMin(x + 16 * j, 16, 3, &s[j], &m[j]);
    ms = std::max(ms, s[j]);
    mm = std::max(mm, m[j]);
  }
  const float d = AsF16(ms / 15), dmin = AsF16(mm / 15);
  uint8_t scales[16], L[kQKK];
  for (int j = 0; j < 16; ++j) {
    const int ls = d ? std::clamp(Nearest(s[j] / d), 0, 15) : 0, lm = dmin ? std::clamp(Nearest(m[j] / dmin), 0, 15) : 0;
    scales[j] = static_cast<uint8_t>(ls | (lm << 4));
    const float dl = d * ls, ml = dmin * lm;
    for (int i = 0; i < 16; ++i) L[16 * j + i] = dl ? static_cast<uint8_t>(std::clamp(Nearest((x[16 * j + i] + ml) / dl), 0, 3)) : 0;
  }
  out->append(reinterpret_cast<const char*>(scales), 16);
  for (int j = 0; j < kQKK; j += 128) {
    for (int l = 0; l < 32; ++l) {
      out->push_back(static_cast<char>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6)));
    }
  }
  PutF16(d, out);
  PutF16(dmin, out);
}

// The sixteen 16-element sub-blocks' signed scales, s[j] = (the element of
// largest magnitude) / -levels, as ggml's symmetric k-quants take them;
// returns the scale of largest magnitude, with its sign.
float SignedSubScales(const float* x, float levels, float* s) {
  float smax = 0, sabs = 0;
  for (int j = 0; j < 16; ++j) {
    float amax = 0, max = 0;
    for (int i = 0; i < 16; ++i) {
      if (std::fabs(x[16 * j + i]) > amax) amax = std::fabs(x[16 * j + i]), max = x[16 * j + i];
    }
    s[j] = max / -levels;
    if (std::fabs(s[j]) > sabs) sabs = std::fabs(s[j]), smax = s[j];
  }
  return smax;
}

void QuantQ3_K(const float* x, std::string* out) {
  float s[16];
  const float d = AsF16(SignedSubScales(x, 4, s) / -32);
  uint8_t sb[12] = {}, L[kQKK], hmask[32] = {};
  for (int j = 0; j < 16; ++j) {
    const int l = d ? std::clamp(Nearest(s[j] / d), -32, 31) + 32 : 32;
    if (j < 8) sb[j] = l & 0xF;
    else sb[j - 8] |= (l & 0xF) << 4;
    sb[8 + j % 4] |= (l >> 4) << (2 * (j / 4));
    const float dl = d * (l - 32);
    for (int i = 0; i < 16; ++i) L[16 * j + i] = static_cast<uint8_t>((dl ? std::clamp(Nearest(x[16 * j + i] / dl), -4, 3) : 0) + 4);
  }
  for (int j = 0; j < kQKK; ++j) {
    if (L[j] > 3) hmask[j % 32] |= 1 << (j / 32), L[j] -= 4;
  }
  out->append(reinterpret_cast<const char*>(hmask), 32);
  for (int j = 0; j < kQKK; j += 128) {
    for (int l = 0; l < 32; ++l) {
      out->push_back(static_cast<char>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6)));
    }
  }
  out->append(reinterpret_cast<const char*>(sb), 12);
  PutF16(d, out);
}

// Q4_K (bits 4) and Q5_K (bits 5): eight sub-blocks of 32 with 6-bit
// scales and mins packed as ScaleMinK4 reads them.
void QuantQ45_K(const float* x, int bits, std::string* out) {
  const int nmax = (1 << bits) - 1;
  float s[8], m[8], ms = 0, mm = 0;
  for (int j = 0; j < 8; ++j) {
    SubScaleMin(x + 32 * j, 32, nmax, &s[j], &m[j]);
    ms = std::max(ms, s[j]);
    mm = std::max(mm, m[j]);
  }
  const float d = AsF16(ms / 63), dmin = AsF16(mm / 63);
  uint8_t sc[12] = {}, L[kQKK];
  for (int j = 0; j < 8; ++j) {
    const int ls = d ? std::clamp(Nearest(s[j] / d), 0, 63) : 0, lm = dmin ? std::clamp(Nearest(m[j] / dmin), 0, 63) : 0;
    if (j < 4) {
      sc[j] = static_cast<uint8_t>(ls);
      sc[j + 4] = static_cast<uint8_t>(lm);
    } else {
      sc[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      sc[j - 4] |= (ls >> 4) << 6;
      sc[j] |= (lm >> 4) << 6;
    }
    const float dl = d * ls, ml = dmin * lm;
    for (int i = 0; i < 32; ++i) L[32 * j + i] = dl ? static_cast<uint8_t>(std::clamp(Nearest((x[32 * j + i] + ml) / dl), 0, nmax)) : 0;
  }
  PutF16(d, out);
  PutF16(dmin, out);
  out->append(reinterpret_cast<const char*>(sc), 12);
  if (bits == 5) {
    uint8_t qh[32] = {};
    for (int n = 0, u = 0; n < kQKK; n += 64, u += 2) {
      for (int j = 0; j < 32; ++j) qh[j] |= ((L[n + j] >> 4) << u) | ((L[n + j + 32] >> 4) << (u + 1));
    }
    out->append(reinterpret_cast<const char*>(qh), 32);
  }
  for (int n = 0; n < kQKK; n += 64) {
    for (int l = 0; l < 32; ++l) out->push_back(static_cast<char>((L[n + l] & 0xF) | ((L[n + l + 32] & 0xF) << 4)));
  }
}

void QuantQ6_K(const float* x, std::string* out) {
  float s[16];
  const float d = AsF16(SignedSubScales(x, 32, s) / -128);
  int8_t sc[16];
  uint8_t L[kQKK], ql[128], qh[64] = {};
  for (int j = 0; j < 16; ++j) {
    sc[j] = static_cast<int8_t>(d ? std::clamp(Nearest(s[j] / d), -128, 127) : 0);
    const float dl = d * sc[j];
    for (int i = 0; i < 16; ++i) L[16 * j + i] = static_cast<uint8_t>((dl ? std::clamp(Nearest(x[16 * j + i] / dl), -32, 31) : 0) + 32);
  }
  for (int j = 0, o = 0; j < kQKK; j += 128, o += 1) {
    for (int l = 0; l < 32; ++l) {
      ql[64 * o + l] = static_cast<uint8_t>((L[j + l] & 0xF) | ((L[j + l + 64] & 0xF) << 4));
      ql[64 * o + l + 32] = static_cast<uint8_t>((L[j + l + 32] & 0xF) | ((L[j + l + 96] & 0xF) << 4));
      qh[32 * o + l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                            ((L[j + l + 96] >> 4) << 6));
    }
  }
  out->append(reinterpret_cast<const char*>(ql), 128);
  out->append(reinterpret_cast<const char*>(qh), 64);
  out->append(reinterpret_cast<const char*>(sc), 16);
  PutF16(d, out);
}

uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((u >> 16) | 64);  // NaN stays NaN
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);              // round to nearest even
}

}  // namespace

Result<GgmlTypeInfo> TypeInfo(uint32_t type) {
  for (const Known& k : kTypes) {
    if (static_cast<uint32_t>(k.type) == type) return k.info;
  }
  return Status::InvalidArgument("tensor type " + std::to_string(type) +
                                 " is not supported (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K-Q6_K)");
}

Result<GgmlType> ParseGgmlType(std::string_view name) {
  std::string want(name);
  for (char& c : want) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const Known& k : kTypes) {
    if (k.info.name == want) return k.type;
  }
  return Status::InvalidArgument("unknown tensor type '" + std::string(name) +
                                 "' (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)");
}

size_t RowBytes(GgmlType t, size_t n) {
  const GgmlTypeInfo i = *TypeInfo(static_cast<uint32_t>(t));
  return n / i.block_elems * i.block_bytes;
}

void DequantizeRow(GgmlType t, const uint8_t* src, float* dst, size_t n) {
  const GgmlTypeInfo info = *TypeInfo(static_cast<uint32_t>(t));
  if (t == GgmlType::kF32) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  if (t == GgmlType::kF16) {  // exact in any conversion; F16C where the CPU has it
    kernels::HalfToFloatN(reinterpret_cast<const uint16_t*>(src), dst, n);
    return;
  }
  if (t == GgmlType::kBF16) {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t u = static_cast<uint32_t>(src[2 * i] | (src[2 * i + 1] << 8)) << 16;
      std::memcpy(&dst[i], &u, 4);
    }
    return;
  }
  if (HasAvx2() && DequantizeBlocksAvx2(t, src, dst, n / info.block_elems)) return;
  DequantizeRowPortable(t, src, dst, n);
}

void DequantizeRowPortable(GgmlType t, const uint8_t* src, float* dst, size_t n) {
  const GgmlTypeInfo info = *TypeInfo(static_cast<uint32_t>(t));
  if (info.block_elems == 1) return DequantizeRow(t, src, dst, n);
  for (size_t b = 0; b < n / info.block_elems; ++b, src += info.block_bytes, dst += info.block_elems) {
    switch (t) {
      case GgmlType::kQ4_0: DeqQ4_0(src, dst); break;
      case GgmlType::kQ4_1: DeqQ4_1(src, dst); break;
      case GgmlType::kQ5_0: DeqQ5(src, dst, false); break;
      case GgmlType::kQ5_1: DeqQ5(src, dst, true); break;
      case GgmlType::kQ8_0: DeqQ8_0(src, dst); break;
      case GgmlType::kQ2_K: DeqQ2_K(src, dst); break;
      case GgmlType::kQ3_K: DeqQ3_K(src, dst); break;
      case GgmlType::kQ4_K: DeqQ45_K(src, dst, false); break;
      case GgmlType::kQ5_K: DeqQ45_K(src, dst, true); break;
      case GgmlType::kQ6_K: DeqQ6_K(src, dst); break;
      default: break;
    }
  }
}

void QuantizeRow(GgmlType t, const float* src, size_t n, std::string* out) {
  const GgmlTypeInfo info = *TypeInfo(static_cast<uint32_t>(t));
  if (t == GgmlType::kF32) {
    out->append(reinterpret_cast<const char*>(src), n * 4);
    return;
  }
  if (t == GgmlType::kF16 || t == GgmlType::kBF16) {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = t == GgmlType::kF16 ? kernels::FloatToHalf(src[i]) : FloatToBf16(src[i]);
      out->append(reinterpret_cast<const char*>(&h), 2);
    }
    return;
  }
  for (size_t b = 0; b < n / info.block_elems; ++b, src += info.block_elems) {
    switch (t) {
      case GgmlType::kQ4_0: QuantSym(src, 4, out); break;
      case GgmlType::kQ5_0: QuantSym(src, 5, out); break;
      case GgmlType::kQ8_0: QuantSym(src, 8, out); break;
      case GgmlType::kQ4_1: QuantAffine(src, 4, out); break;
      case GgmlType::kQ5_1: QuantAffine(src, 5, out); break;
      case GgmlType::kQ2_K: QuantQ2_K(src, out); break;
      case GgmlType::kQ3_K: QuantQ3_K(src, out); break;
      case GgmlType::kQ4_K: QuantQ45_K(src, 4, out); break;
      case GgmlType::kQ5_K: QuantQ45_K(src, 5, out); break;
      case GgmlType::kQ6_K: QuantQ6_K(src, out); break;
      default: break;
    }
  }
}

}  // namespace tierkv::model

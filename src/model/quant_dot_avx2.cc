// AVX2 dot products of one weight row with 1, 2 or 4 activation rows in the
// weights' own type (model/quant_dot.h): bytes × int8 through maddubs/madd
// into int32, one FMA per super-block (k-quants) or per four blocks (Q8_0,
// Q4_0) for the scales. The integer sums equal the portable loops'; only
// the order of the fp32 additions differs.
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/fp16.h"
#include "model/dequant_avx2.h"
#include "model/quant_dot.h"

namespace tierkv::model {
namespace {

#define TIERKV_AVX2 __attribute__((target("avx2,fma,f16c")))

TIERKV_AVX2 inline float Hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// An fp16 scale at p, converted in a register (F16C).
TIERKV_AVX2 inline float H(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Q4_K/Q5_K's twelve bytes of 6-bit scales and mins, unpacked at once in
// general registers: the 8 scales as the bytes of *scales, the 8 mins as
// those of *mins (the values ScaleMinK4 gives one at a time). Kept out of
// memory: four 32-bit stores read back as one 64-bit load cannot be
// forwarded, and the stall cost ~10% of a one-row product (Zen 1).
inline void ScalesMins(const uint8_t* q, uint64_t* scales, uint64_t* mins) {
  uint32_t u0, u1, u2;
  std::memcpy(&u0, q, 4);
  std::memcpy(&u1, q + 4, 4);
  std::memcpy(&u2, q + 8, 4);
  constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
  const uint32_t scales_hi = (u2 & k4) | (((u0 >> 6) & k2) << 4);
  const uint32_t mins_hi = ((u2 >> 4) & k4) | (((u1 >> 6) & k2) << 4);
  *scales = (u0 & k6) | (static_cast<uint64_t>(scales_hi) << 32);
  *mins = (u1 & k6) | (static_cast<uint64_t>(mins_hi) << 32);
}

TIERKV_AVX2 inline __m256i Load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
TIERKV_AVX2 inline __m128i Load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// Asks for the cache lines of the weight block kAhead bytes past w (a
// block of kBytes). The weights stream from memory once per product; the
// hardware prefetcher alone left a one-row product at ~65% of the read
// bandwidth here (docs/engine.md). Only the one- and two-row kernels ask:
// with four rows a block takes long enough for the hardware's prefetch, and
// the hints measured slower. A prefetch past the row's end is a hint only,
// never a fault.
constexpr size_t kAhead = 1024;
template <size_t kBytes>
inline void PrefetchBlock(const uint8_t* w) {
  #pragma GCC unroll 4
  for (size_t off = 0; off < kBytes; off += 64) {
    // Through an integer: the address may lie past the row's end.
    __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(w) + kAhead + off), 0, 0);
  }
}

// Each kernel multiplies one weight row with MR activation rows (a, a +
// stride, ...), decoding the weight blocks once for all of them, and writes
// the MR sums to out[0..MR).

TIERKV_AVX2 inline float Hsum128(__m128 v) {
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

// Blocks of 32 weights (Q8_0, Q4_0, Q4_1) against Q8_0 (Q8_1) activations:
// each block decoded once to 32 bytes (Decode), its fp16 scale at the
// block's start; |x| against y with x's sign, so maddubs sees an unsigned
// operand (y is never -128, whose negation would wrap:
// QuantizeActivations). `am` points at the activation block's int8 values.
// Returns the block's 32 products as 8 int32 pair sums.
TIERKV_AVX2 inline __m256i BlockSums(__m256i x, __m256i ax, const uint8_t* q) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(Load(q), x)), _mm256_set1_epi16(1));
}

// The fp16 scales at p, p + kBytes, p + 2 kBytes, p + 3 kBytes as 4 floats.
template <size_t kBytes>
TIERKV_AVX2 inline __m128 Scales4(const uint8_t* p) {
  uint16_t h[4];
  #pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) std::memcpy(&h[j], p + j * kBytes, 2);
  uint64_t u;
  std::memcpy(&u, h, 8);
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(u)));
}

// Activation blocks of kA bytes: Q8_0 (34: d, q) or Q8_1 (36: d, s, q).
// With Q8_1 the weights carry a minimum m after their scale (Q4_1), and
// each block adds m · s to the scaled integer sum, as ggml's Q4_1 · Q8_1.
template <size_t kA>
constexpr size_t kActQ = kA - 32;  // the int8 values' offset in a block
template <size_t kA>
constexpr bool kHasMin = kA == 36;

// Four blocks a step: each block's 32 products with a row summed to one
// int32 (exact: at most 32 x 128 x 127), the four sums side by side in one
// register and scaled by the four blocks' scale products at once. One
// conversion, one multiply and one FMA per four blocks and row where a
// block at a time spends a conversion, a broadcast and an FMA on eight
// lanes per block and row, and scales converted four at a time: the
// one-row product 1.36x as fast here (Zen 1, weights in L2; docs/engine.md),
// which makes a one-row Q8_0 product read-bound instead of compute-bound.
// Each block's dw · da is the fp32 product the block-at-a-time loop forms;
// its integer sum is converted once, whole, so the rounding is no worse.
// Writes the sums over the first 4 ⌊blocks / 4⌋ blocks to out[0..MR).
template <int MR, size_t kBytes, __m256i (*Decode)(const uint8_t*), size_t kA>
TIERKV_AVX2 void Blocks32By4(const uint8_t* w, const uint8_t* a, size_t stride, int blocks, float* out) {
  __m128 acc[MR];
  #pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) acc[m] = _mm_setzero_ps();
  for (int b = 0; b + 4 <= blocks; b += 4, w += 4 * kBytes, a += 4 * kA) {
    __m256i x[4], ax[4];
    #pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      if constexpr (MR <= 2) PrefetchBlock<kBytes>(w + j * kBytes);
      x[j] = Decode(w + j * kBytes);
      ax[j] = _mm256_sign_epi8(x[j], x[j]);
    }
    const __m128 dw = Scales4<kBytes>(w);
    #pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const uint8_t* am = a + m * stride;
      __m128i q[4];
      #pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __m256i p = BlockSums(x[j], ax[j], am + kA * j + kActQ<kA>);
        q[j] = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
      }
      const __m128i sums = _mm_hadd_epi32(_mm_hadd_epi32(q[0], q[1]), _mm_hadd_epi32(q[2], q[3]));
      acc[m] = _mm_fmadd_ps(_mm_mul_ps(dw, Scales4<kA>(am)), _mm_cvtepi32_ps(sums), acc[m]);
      if constexpr (kHasMin<kA>) acc[m] = _mm_fmadd_ps(Scales4<kBytes>(w + 2), Scales4<kA>(am + 2), acc[m]);
    }
  }
  #pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) out[m] = Hsum128(acc[m]);
}

// MR rows: four blocks a step (above), then the last blocks one at a time,
// each row's eight pair sums scaled and added to its eight lanes.
template <int MR, size_t kBytes, __m256i (*Decode)(const uint8_t*), size_t kA = 34>
TIERKV_AVX2 void Blocks32(const uint8_t* w, const uint8_t* a, size_t stride, int cols, float* out) {
  int b = cols / 32 / 4 * 4;
  float head[MR], mins[MR] = {};
  Blocks32By4<MR, kBytes, Decode, kA>(w, a, stride, b, head);
  w += b * kBytes;
  a += b * kA;
  __m256 acc[MR];
  #pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) acc[m] = _mm256_setzero_ps();
  for (; b < cols / 32; ++b, w += kBytes, a += kA) {
    const __m256i x = Decode(w);
    const __m256i ax = _mm256_sign_epi8(x, x);
    const float dw = H(w);
    #pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const uint8_t* am = a + m * stride;
      const __m256i s = BlockSums(x, ax, am + kActQ<kA>);
      acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(dw * H(am)), _mm256_cvtepi32_ps(s), acc[m]);
      if constexpr (kHasMin<kA>) mins[m] += H(w + 2) * H(am + 2);
    }
  }
  #pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) out[m] = head[m] + Hsum(acc[m]) + mins[m];
}

TIERKV_AVX2 inline __m256i DecodeQ8_0(const uint8_t* w) { return Load(w + 2); }

// Q4_1's nibbles as they are (0-15): low nibbles are elements 0-15, high
// ones 16-31, after the fp16 scale and minimum.
TIERKV_AVX2 inline __m256i DecodeQ4_1(const uint8_t* w) {
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m128i v = Load128(w + 4);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
}

// Nibble - 8: low nibbles are elements 0-15, high ones 16-31.
TIERKV_AVX2 inline __m256i DecodeQ4_0(const uint8_t* w) {
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m128i v = Load128(w + 2);
  return _mm256_sub_epi8(_mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4)),
                         _mm256_set1_epi8(8));
}

// Two groups' int16 pair sums (from maddubs, each at most 16,256 in
// magnitude so that two added still fit) folded into one register and
// multiplied by their scales in one madd. Unpacking interleaves them, p0's
// lanes j and j + 4 of each 128-bit half added into the even 16-bit lanes,
// p1's into the odd ones (a lane never takes sums from the other half), so
// with s2 holding p0's scale in the even int16 lanes and p1's in the odd,
// each int32 lane gets p0's sums times its scale plus p1's times its own:
// the total two madds would give, for one multiply and three cheap
// operations (two shifts, two adds and a blend measured slower on Zen 1,
// whose one vector multiply pipe the maddubs keep half busy).
TIERKV_AVX2 inline __m256i FoldMadd(__m256i p0, __m256i p1, __m256i s2) {
  const __m256i folded = _mm256_add_epi16(_mm256_unpacklo_epi16(p0, p1), _mm256_unpackhi_epi16(p0, p1));
  return _mm256_madd_epi16(folded, s2);
}

// FoldMadd with ggml's grouping: each int32 lane gets the two adjacent
// pair sums of p0 and those of p1 (shifts, adds and a blend: two more
// operations than unpacking). Q6_K keeps it because its lanes then hold
// the sums ggml's kernel forms, so the fp32 rounding that follows is
// llama.cpp's (its oracle test parts from llama.cpp at a 0.0596-logit
// near-tie on Zen 1 with these lanes, 0.0609 with FoldMadd's).
TIERKV_AVX2 inline __m256i FoldMaddAdjacent(__m256i p0, __m256i p1, __m256i s2) {
  const __m256i even = _mm256_add_epi16(p0, _mm256_srli_epi32(p0, 16));
  const __m256i odd = _mm256_add_epi16(p1, _mm256_slli_epi32(p1, 16));
  return _mm256_madd_epi16(_mm256_blend_epi16(even, odd, 0xAA), s2);
}

// Sub-blocks 2K and 2K+1 (64 elements) of a Q4_K/Q5_K super-block for MR
// activation rows: nibbles (and Q5_K's fifth bits) decoded once.
template <bool kFive, int K, int MR>
TIERKV_AVX2 inline void Q45_KPair(const uint8_t* qs, __m256i* hb, __m256i scales, const uint8_t* y, size_t stride,
                                  __m256i* sumi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i q = Load(qs + 32 * K);
  __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
  if (kFive) {
    const __m256i one = _mm256_set1_epi8(1);
    lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(*hb, one), 4));
    hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(*hb, 1), one), 4));
    *hb = _mm256_srli_epi16(*hb, 2);
  }
  // The two sub-blocks' pair sums (each at most 2 x 31 x 127) folded into
  // one madd by (s_2K, s_2K+1): three multiplies per 64 elements and row
  // instead of four.
  const __m256i s2 = _mm256_shuffle_epi32(scales, K * 0x55);
  #pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    const uint8_t* ym = y + m * stride + 64 * K;
    const __m256i pl = _mm256_maddubs_epi16(lo, Load(ym)), ph = _mm256_maddubs_epi16(hi, Load(ym + 32));
    sumi[m] = _mm256_add_epi32(sumi[m], FoldMadd(pl, ph, s2));
  }
}

// A Q4_K/Q5_K super-block's header: its 8 scales and 8 mins as int16,
// and [d, dmin, 0, 0].
struct KHeader {
  __m128i scales, mins;
  __m128 dd;
};
TIERKV_AVX2 inline KHeader ReadKHeader(const uint8_t* w) {
  uint64_t scales8, mins8;
  ScalesMins(w + 4, &scales8, &mins8);
  uint32_t d2;
  std::memcpy(&d2, w, 4);
  return {_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(scales8))),
          _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(mins8))),
          _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(d2)))};  // d and dmin converted together
}

// A super-block's scales against the Q8_K activations at am (scale yd):
// returns [yd d, yd dmin, 0, 0] for the caller's sums, and adds the mins'
// term, yd dmin · Σ_j min_j · (bsums[2j] + bsums[2j+1]), into *acc_m (4
// lanes, subtracted at the end).
TIERKV_AVX2 inline __m128 ScaleAndMins(const KHeader& hd, const uint8_t* am, __m128* acc_m) {
  float yd;
  std::memcpy(&yd, am, 4);
  const __m128 f = _mm_mul_ps(hd.dd, _mm_set1_ps(yd));
  const __m128i bs = _mm_hadd_epi16(Load128(am + 260), Load128(am + 276));
  *acc_m = _mm_fmadd_ps(_mm_shuffle_ps(f, f, 0x55), _mm_cvtepi32_ps(_mm_madd_epi16(hd.mins, bs)), *acc_m);
  return f;
}

// Q4_K (five = false) and Q5_K: 8 sub-blocks of 32 with 6-bit scales and
// mins; the mins meet the activations' 16-element sums.
template <bool kFive, int MR>
TIERKV_AVX2 void Q45_K(const uint8_t* w, const uint8_t* a, size_t stride, int cols, float* out) {
  constexpr size_t kBytes = kFive ? 176 : 144;
  __m256 acc[MR];
  __m128 acc_m[MR];
  #pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    acc[m] = _mm256_setzero_ps();
    acc_m[m] = _mm_setzero_ps();
  }
  for (int b = 0; b < cols / 256; ++b, w += kBytes, a += 292) {
    if constexpr (MR <= 2) PrefetchBlock<kBytes>(w);
    const KHeader hd = ReadKHeader(w);
    const __m256i scales = _mm256_broadcastsi128_si256(hd.scales);
    const uint8_t* qs = w + 16 + (kFive ? 32 : 0);
    __m256i hb = kFive ? Load(w + 16) : _mm256_setzero_si256();
    __m256i sumi[MR];
    #pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) sumi[m] = _mm256_setzero_si256();
    Q45_KPair<kFive, 0, MR>(qs, &hb, scales, a + 4, stride, sumi);
    Q45_KPair<kFive, 1, MR>(qs, &hb, scales, a + 4, stride, sumi);
    Q45_KPair<kFive, 2, MR>(qs, &hb, scales, a + 4, stride, sumi);
    Q45_KPair<kFive, 3, MR>(qs, &hb, scales, a + 4, stride, sumi);
    #pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const __m128 f = ScaleAndMins(hd, a + m * stride, &acc_m[m]);
      acc[m] = _mm256_fmadd_ps(_mm256_broadcastss_ps(f), _mm256_cvtepi32_ps(sumi[m]), acc[m]);
    }
  }
  #pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) out[m] = Hsum(acc[m]) - Hsum128(acc_m[m]);
}

// The one-row Q4_K/Q5_K product in 128-bit registers, for CPUs that run
// AVX2 as two 128-bit halves (Avx2InHalves: Zen 1). Each 32 values of a
// sub-block pair are taken 16 at a time; the two halves' pair sums (each
// int16 lane at most 2 x 31 x 128) share their scales, so they add in
// int16 before one fold and one madd (a lane then at most 4 x 31 x 128 =
// 31,744: the tightest bound here): five 128-bit multiplies per 64 values
// (four maddubs, one madd) where the 256-bit kernel issues six on Zen 1's
// one multiply pipe. 0.93x the 256-bit kernel's time per Q4_K decode step
// there (median of 3 pairs; 36 against 40 cycles per super-block with the
// weights in L1, 34 with one fold per 64 values instead of two;
// docs/engine.md). On full-width AVX2 it would take twice the instructions
// (not measured there), so only those CPUs get it.
template <bool kFive>
TIERKV_AVX2 void Q45_KHalves(const uint8_t* w, const uint8_t* a, size_t, int cols, float* out) {
  constexpr size_t kBytes = kFive ? 176 : 144;
  const __m128i m4 = _mm_set1_epi8(0x0F), one = _mm_set1_epi8(1);
  __m128 acc = _mm_setzero_ps(), acc_m = _mm_setzero_ps();
  for (int b = 0; b < cols / 256; ++b, w += kBytes, a += 292) {
    PrefetchBlock<kBytes>(w);
    const KHeader hd = ReadKHeader(w);
    const uint8_t* qs = w + 16 + (kFive ? 32 : 0);
    __m128i hb[2] = {_mm_setzero_si128(), _mm_setzero_si128()};
    if (kFive) hb[0] = Load128(w + 16), hb[1] = Load128(w + 32);
    __m128i sumi[2] = {_mm_setzero_si128(), _mm_setzero_si128()};
    #pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      // The two halves' pair sums of sub-block 2k (pl) and of 2k + 1 (ph)
      // added before they are folded: one fold per 64 values, not two.
      __m128i pl = _mm_setzero_si128(), ph = _mm_setzero_si128();
      #pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m128i q = Load128(qs + 32 * k + 16 * h);
        __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
        if (kFive) {
          lo = _mm_or_si128(lo, _mm_slli_epi16(_mm_and_si128(hb[h], one), 4));
          hi = _mm_or_si128(hi, _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(hb[h], 1), one), 4));
          hb[h] = _mm_srli_epi16(hb[h], 2);
        }
        const uint8_t* ym = a + 4 + 64 * k + 16 * h;
        const __m128i l = _mm_maddubs_epi16(lo, Load128(ym)), u = _mm_maddubs_epi16(hi, Load128(ym + 32));
        pl = _mm_add_epi16(pl, l);
        ph = _mm_add_epi16(ph, u);
      }
      const __m128i folded = _mm_add_epi16(_mm_unpacklo_epi16(pl, ph), _mm_unpackhi_epi16(pl, ph));
      // (s_2k, s_2k+1) in every 32-bit lane; pshufb, as k is not a constant before unrolling.
      const __m128i s2 = _mm_shuffle_epi8(hd.scales, _mm_set1_epi32(0x03020100 + 0x04040404 * k));
      sumi[k & 1] = _mm_add_epi32(sumi[k & 1], _mm_madd_epi16(folded, s2));
    }
    const __m128 f = ScaleAndMins(hd, a, &acc_m);
    acc = _mm_fmadd_ps(_mm_shuffle_ps(f, f, 0), _mm_cvtepi32_ps(_mm_add_epi32(sumi[0], sumi[1])), acc);
  }
  *out = Hsum128(acc) - Hsum128(acc_m);
}

// Q6_K's sixteen int8 scales for folded sub-block pair P (0-3; elements
// 64P to 64P + 63): in the low 128 bits the scales of the first 16 elements
// of each 32 (sub-blocks 4P and 4P + 2) alternating, in the high 128 bits
// those of the second 16 (4P + 1, 4P + 3), as int16.
TIERKV_AVX2 inline __m256i Q6_KPairScales(__m128i sc, int p) {
  const __m128i pick = _mm_add_epi8(_mm_setr_epi8(0, 2, 0, 2, 0, 2, 0, 2, 1, 3, 1, 3, 1, 3, 1, 3),
                                    _mm_set1_epi8(static_cast<char>(4 * p)));
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, pick));
}

// Two Q6_K groups of 32 (k and k + 1, values q - 32 in [-32, 31] in v0 and
// v1) for MR rows, y at the first group's activations: |v| against y with
// v's sign, as in Blocks32 (y never -128), so each pair sum is at most 2 x
// 32 x 127, and the two groups folded into one madd by their scales (s2,
// as Q6_KPairScales lays them out): three multiplies per 64 elements
// instead of six. Each int32 lane holds the same sum as in ggml's kernel
// (q · y - 32 · y per pair), so the fp32 rounding that follows is the same.
template <int MR>
TIERKV_AVX2 inline void Q6_KPair(__m256i v0, __m256i v1, __m256i s2, const uint8_t* y, size_t stride, __m256i* sumi) {
  const __m256i a0 = _mm256_sign_epi8(v0, v0), a1 = _mm256_sign_epi8(v1, v1);
  #pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    const uint8_t* ym = y + m * stride;
    const __m256i p0 = _mm256_maddubs_epi16(a0, _mm256_sign_epi8(Load(ym), v0));
    const __m256i p1 = _mm256_maddubs_epi16(a1, _mm256_sign_epi8(Load(ym + 32), v1));
    sumi[m] = _mm256_add_epi32(sumi[m], FoldMaddAdjacent(p0, p1, s2));
  }
}

// Q6_K: 16 sub-blocks of 16 with int8 scales, values q - 32.
template <int MR>
TIERKV_AVX2 void Q6_K(const uint8_t* w, const uint8_t* a, size_t stride, int cols, float* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
  __m256 acc[MR];
  #pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) acc[m] = _mm256_setzero_ps();
  for (int b = 0; b < cols / 256; ++b, w += 210, a += 292) {
    if constexpr (MR <= 2) PrefetchBlock<210>(w);
    const uint8_t* ql = w;
    const uint8_t* qh = w + 128;
    const __m128i sc = Load128(w + 192);
    __m256i sumi[MR];
    #pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) sumi[m] = _mm256_setzero_si256();
    #pragma GCC unroll 2
    for (int n = 0; n < 2; ++n, ql += 64, qh += 32) {
      const __m256i lo = Load(ql), hi = Load(ql + 32), h = Load(qh);
      const __m256i v[4] = {
          _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(lo, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30)), k32),
          _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(hi, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30)), k32),
          _mm256_sub_epi8(
              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo, 4), m4), _mm256_and_si256(h, m30)), k32),
          _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(hi, 4), m4),
                                          _mm256_and_si256(_mm256_srli_epi16(h, 2), m30)),
                          k32),
      };
      const uint8_t* y = a + 4 + 128 * n;
      Q6_KPair<MR>(v[0], v[1], Q6_KPairScales(sc, 2 * n), y, stride, sumi);
      Q6_KPair<MR>(v[2], v[3], Q6_KPairScales(sc, 2 * n + 1), y + 64, stride, sumi);
    }
    const float d = H(w + 208);
    #pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      float yd;
      std::memcpy(&yd, a + m * stride, 4);
      acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(yd * d), _mm256_cvtepi32_ps(sumi[m]), acc[m]);
    }
  }
  #pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) out[m] = Hsum(acc[m]);
}

// F16 / BF16 weights · fp32 activations, 16 elements per step in 2 sums per row.
template <bool kBf16>
TIERKV_AVX2 inline __m256 Widen(const uint8_t* p) {
  const __m128i h = Load128(p);
  if (kBf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}

template <bool kBf16>
TIERKV_AVX2 inline float Widen1(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (!kBf16) return _cvtsh_ss(h);
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <bool kBf16, int MR>
TIERKV_AVX2 void Half(const uint8_t* w, const uint8_t* a, size_t stride, int cols, float* out) {
  __m256 s0[MR], s1[MR];
  #pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) s0[m] = s1[m] = _mm256_setzero_ps();
  int k = 0;
  for (; k + 16 <= cols; k += 16) {
    const __m256 w0 = Widen<kBf16>(w + 2 * k), w1 = Widen<kBf16>(w + 2 * k + 16);
    #pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const auto* x = reinterpret_cast<const float*>(a + m * stride);
      s0[m] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + k), s0[m]);
      s1[m] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + k + 8), s1[m]);
    }
  }
  #pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    const auto* x = reinterpret_cast<const float*>(a + m * stride);
    float sum = Hsum(_mm256_add_ps(s0[m], s1[m]));
    for (int j = k; j < cols; ++j) sum += Widen1<kBf16>(w + 2 * j) * x[j];
    out[m] = sum;
  }
}

template <template <int> class F>
constexpr MultiDot kTable = {F<1>::Run, F<2>::Run, F<4>::Run};

template <int MR> struct Q8_0K { static constexpr auto Run = Blocks32<MR, 34, DecodeQ8_0>; };
template <int MR> struct Q4_0K { static constexpr auto Run = Blocks32<MR, 18, DecodeQ4_0>; };
template <int MR> struct Q4_1K { static constexpr auto Run = Blocks32<MR, 20, DecodeQ4_1, 36>; };
template <int MR> struct Q4_KK { static constexpr auto Run = Q45_K<false, MR>; };
template <int MR> struct Q5_KK { static constexpr auto Run = Q45_K<true, MR>; };
template <int MR> struct Q6_KK { static constexpr auto Run = Q6_K<MR>; };
template <int MR> struct F16K { static constexpr auto Run = Half<false, MR>; };
template <int MR> struct BF16K { static constexpr auto Run = Half<true, MR>; };

// Q4_K and Q5_K with the one-row kernel in 128-bit registers.
constexpr MultiDot kQ4_KHalves = {Q45_KHalves<false>, Q45_K<false, 2>, Q45_K<false, 4>};
constexpr MultiDot kQ5_KHalves = {Q45_KHalves<true>, Q45_K<true, 2>, Q45_K<true, 4>};

}  // namespace

const MultiDot* DotAvx2(GgmlType t, bool halves) {
  switch (t) {
    case GgmlType::kQ4_0: return &kTable<Q4_0K>;
    case GgmlType::kQ4_1: return &kTable<Q4_1K>;
    case GgmlType::kQ8_0: return &kTable<Q8_0K>;
    case GgmlType::kQ4_K: return halves ? &kQ4_KHalves : &kTable<Q4_KK>;
    case GgmlType::kQ5_K: return halves ? &kQ5_KHalves : &kTable<Q5_KK>;
    case GgmlType::kQ6_K: return &kTable<Q6_KK>;
    case GgmlType::kF16: return &kTable<F16K>;
    case GgmlType::kBF16: return &kTable<BF16K>;
    default: return nullptr;
  }
}

// ---- activation quantizers: the portable loops' bytes (quant_dot.cc) ----
namespace {

// Whether every lane of the n floats at x is finite (x - x is 0 for a
// finite x, NaN for an infinity or a NaN), and their largest magnitude.
TIERKV_AVX2 inline bool FiniteAmax(const float* x, int n, float* amax) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  for (int j = 0; j < n; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v));
    bad = _mm256_or_ps(bad, _mm256_sub_ps(v, v));
  }
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  *amax = _mm_cvtss_f32(h);
  return _mm256_movemask_ps(_mm256_cmp_ps(bad, _mm256_setzero_ps(), _CMP_NEQ_UQ)) == 0;
}

// 32 rounded products x·scale (ties to even, the current rounding mode as
// the portable NearestInt's) at most 127, to 32 int8 at q; returns the four
// int32 vectors for sums.
TIERKV_AVX2 inline void Round32(const float* x, __m256 scale, int8_t* q, __m256i out[4]) {
  const __m256i top = _mm256_set1_epi32(127);
  for (int i = 0; i < 4; ++i) {
    out[i] = _mm256_min_epi32(top, _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), scale)));
  }
  // packs work per 128-bit lane: the permutation puts the 32 bytes back in order.
  const __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(out[0], out[1]), _mm256_packs_epi32(out[2], out[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

TIERKV_AVX2 inline int Hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

}  // namespace

namespace {

// One block of 32 as Q8_0 and Q8_1 hold it: the fp16 scale at d, the
// values at q. Returns the values' sum as an fp16 of d · Σq (Q8_1's s),
// NaN for a block holding a NaN or an infinity (then d is NaN too, the
// values zeros).
TIERKV_AVX2 inline uint16_t Block8(const float* x, uint8_t* d, int8_t* q) {
  constexpr int kBlock = 32;
  float amax;
  if (!FiniteAmax(x, kBlock, &amax)) {
    const uint16_t h = kernels::FloatToHalf(std::numeric_limits<float>::quiet_NaN());
    std::memcpy(d, &h, 2);
    std::memset(q, 0, kBlock);
    return h;
  }
  const Q8_0Scale sc = Q8_0ScaleOf(amax);
  const uint16_t h = kernels::FloatToHalf(sc.d);
  std::memcpy(d, &h, 2);
  __m256i ints[4];
  Round32(x, _mm256_set1_ps(sc.inverse), q, ints);
  const int sum = Hsum(_mm256_add_epi32(_mm256_add_epi32(ints[0], ints[1]), _mm256_add_epi32(ints[2], ints[3])));
  return kernels::FloatToHalf(static_cast<float>(sum) * sc.d);
}

}  // namespace

TIERKV_AVX2 void QuantizeQ8_0Avx2(const float* x, int cols, uint8_t* out) {
  for (int b = 0; b < cols / 32; ++b, x += 32, out += 2 + 32) Block8(x, out, reinterpret_cast<int8_t*>(out + 2));
}

// Q8_0's rounding with s = fp16(d · Σq) after d (ggml's block_q8_1).
TIERKV_AVX2 void QuantizeQ8_1Avx2(const float* x, int cols, uint8_t* out) {
  for (int b = 0; b < cols / 32; ++b, x += 32, out += 4 + 32) {
    const uint16_t s = Block8(x, out, reinterpret_cast<int8_t*>(out + 4));
    std::memcpy(out + 2, &s, 2);
  }
}

TIERKV_AVX2 void QuantizeQ8_KAvx2(const float* x, int cols, uint8_t* out) {
  constexpr int kBlock = 256;
  for (int b = 0; b < cols / kBlock; ++b, x += kBlock, out += 4 + kBlock + 32) {
    auto* q = reinterpret_cast<int8_t*>(out + 4);
    int16_t sums[16] = {};
    float d = 0, amax, iscale = 0;
    const bool finite = FiniteAmax(x, kBlock, &amax);
    if (finite && amax != 0) {
      int j = 0;  // the first value of largest magnitude gives the sign
      while (std::fabs(x[j]) != amax) ++j;
      iscale = Q8_KInverseOf(x[j]);
    }
    if (!finite) {
      std::memset(q, 0, kBlock);
      d = std::numeric_limits<float>::quiet_NaN();
    } else if (iscale != 0) {
      const __m256 s = _mm256_set1_ps(iscale);
      for (int i = 0; i < kBlock / 32; ++i) {
        __m256i ints[4];
        Round32(x + 32 * i, s, q + 32 * i, ints);
        sums[2 * i] = static_cast<int16_t>(Hsum(_mm256_add_epi32(ints[0], ints[1])));
        sums[2 * i + 1] = static_cast<int16_t>(Hsum(_mm256_add_epi32(ints[2], ints[3])));
      }
      d = 1.f / iscale;
    } else {  // zeros, or denormals
      std::memset(q, 0, kBlock);
    }
    std::memcpy(out, &d, 4);
    std::memcpy(out + 4 + kBlock, sums, sizeof(sums));
  }
}

}  // namespace tierkv::model

#undef TIERKV_AVX2  // file-local (unity batches put other files after this one)

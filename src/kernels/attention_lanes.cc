// Per KV head: the keys (prefix rows, then the new rows, zero rows up to a
// multiple of 16) and the values are converted to fp32 once. Then per query
// head of the group and per block of 16 new tokens (one per lane):
//   1+2. scores S[j][lane] for every key the block can see, 8 keys at a
//      time, and while they are in registers e = 2^S (zero where causality
//      hides the key) and the lane's sum (the fused pass). 2^S is not
//      shifted by the lane's max; when a lane's sum says a score left the
//      range where that is exact, or when the near-zero count is wanted, the
//      block is done in two passes instead: scores and each lane's max,
//      then e = 2^(S - max) in place, the sum and the count;
//   3. with values: O[d][lane] += e[j][lane] * V[j][d], 16 dimensions at a
//      time, then out = O / sum;
//   4. with column sums: colsum[j] += the sum across lanes of
//      e[j][lane] / sum, 16 keys reduced together. (Keeping several blocks'
//      weights to reduce them once measured no faster.)
#include "kernels/attention_lanes.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/simd_math.h"

namespace tierkv::kernels {
namespace {

// vreduceps (the exponential's range reduction) is AVX512DQ.
#define TIERKV_LANES __attribute__((target("avx512f,avx512dq")))

constexpr int kLanes = 16;        // new tokens per block; keys per score tile
constexpr int kMaxHeadDim = 128;  // head_dim is one of 16, 32, 64, 128
// Keys per score tile: 8 accumulators beside the query vectors the compiler
// keeps in registers (with 16 it spilled accumulators: 18% slower).
constexpr int kTile = 8;
// The lanes kernel measured faster than the row kernel from 2 new rows (one
// row uses one lane of 16) and than the matrix-product path at every length
// up to 4,096 (docs/engine.md).
constexpr int kMinRows = 2;

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return has;
}

size_t RoundUp(size_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

// Lanes of block i0 that see new key t (causal: token i sees t <= i).
TIERKV_LANES inline __mmask16 Sees(int i0, int t) {
  const __m512i lane = _mm512_add_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      _mm512_set1_epi32(i0));
  return _mm512_cmp_epi32_mask(lane, _mm512_set1_epi32(t), _MM_CMPINT_NLT);
}

// The scores of keys [j0, j0 + kTile) for the 16 lanes' queries qt.
// head_dim is a template argument so that the key rows' addresses are
// constant offsets (with a run-time stride they spill registers).
template <int hd>
TIERKV_LANES inline void TileScores(const float* qt, const float* k, int j0, __m512* acc) {
  for (int u = 0; u < kTile; ++u) acc[u] = _mm512_setzero_ps();
  const float* kr = k + static_cast<size_t>(j0) * hd;
#pragma GCC unroll 16
  for (int d = 0; d < hd; ++d) {
    const __m512 qd = _mm512_loadu_ps(qt + d * kLanes);
    for (int u = 0; u < kTile; ++u) acc[u] = _mm512_fmadd_ps(qd, _mm512_set1_ps(kr[u * hd + d]), acc[u]);
  }
}

// Pass 1. S[j*16 + lane] = qt_lane · k_j for keys [0, nk), nk a multiple of
// 16 (k has that many rows); returns each lane's max over the keys it sees
// (prefix keys [0, np) are seen by all, key np + t by lanes with i0+lane >= t).
template <int hd>
TIERKV_LANES __m512 Scores(const float* qt, const float* k, int nk, int np, int i0, float* S) {
  __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int j0 = 0; j0 < nk; j0 += kTile) {
    __m512 acc[kTile];
    TileScores<hd>(qt, k, j0, acc);
    for (int u = 0; u < kTile; ++u) _mm512_storeu_ps(S + (j0 + u) * kLanes, acc[u]);
    if (j0 + kTile <= np) {
      for (int w = kTile / 2; w > 0; w /= 2) {
        for (int u = 0; u < w; ++u) acc[u] = _mm512_max_ps(acc[u], acc[u + w]);
      }
      m = _mm512_max_ps(m, acc[0]);
    } else {
      for (int u = 0; u < kTile; ++u) {
        const int j = j0 + u;
        const __mmask16 seen = j < np ? __mmask16(0xFFFF) : Sees(i0, j - np);
        m = _mm512_mask_max_ps(m, seen, m, acc[u]);
      }
    }
  }
  return m;
}

// 2^x, 16 lanes, for the softmax (x <= 0 where it matters; a large negative
// x gives 0): 2^x = 2^f · 2^floor(x), f = x - floor(x) in [0, 1) by one
// vreduceps, and vscalefps applies 2^floor(x) itself. The polynomial is the
// degree-5 fit of 2^g on |g| <= 1/2 for the least maximum relative error
// (Lawson's iteration), moved to [0, 1) (q(f) = sqrt(2)·p(f - 1/2)): below
// 1e-7 relative, as FastExp.
TIERKV_LANES inline __m512 Exp2(__m512 x) {
  const __m512 f = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 p = _mm512_set1_ps(1.8775759520626774e-03f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(8.98934184045773e-03f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.582631658484428e-02f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24015361754044354f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931530731427457f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.9999999250645536f));
  return _mm512_scalef_ps(p, x);
}

struct BlockShape {
  int np;      // prefix keys
  int i0;      // first new token of the block
  int rows;    // real lanes (new tokens) in the block, 1..16
  int nk;      // keys the block sees: np + i0 + rows
};

// Pass 2. e = 2^(S - m) in place over [0, nk), zero where the lane does not
// see the key; returns each lane's sum. Counts weights below 1% of the
// lane's max (real lanes, seen keys) into *near_zero when it is set.
TIERKV_LANES __m512 Exponentials(const BlockShape& b, __m512 m, float* S, uint64_t* near_zero) {
  __m512 sum[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  const __mmask16 real = static_cast<__mmask16>((1u << b.rows) - 1);
  const __m512 tiny = _mm512_set1_ps(0.01f);
  uint64_t zeros = 0;
  auto one = [&](int j, __mmask16 seen, __m512& acc) TIERKV_LANES {
    float* s = S + j * kLanes;
    const __m512 e = _mm512_maskz_mov_ps(seen, Exp2(_mm512_sub_ps(_mm512_loadu_ps(s), m)));
    _mm512_storeu_ps(s, e);
    acc = _mm512_add_ps(acc, e);
    if (near_zero) zeros += __builtin_popcount(_mm512_mask_cmp_ps_mask(seen & real, e, tiny, _CMP_LT_OQ));
  };
  int j = 0;
  for (; j + 2 <= b.np; j += 2) {  // prefix keys: seen by every lane
    one(j, 0xFFFF, sum[0]);
    one(j + 1, 0xFFFF, sum[1]);
  }
  for (; j < b.nk; ++j) one(j, j < b.np ? __mmask16(0xFFFF) : Sees(b.i0, j - b.np), sum[j & 1]);
  if (near_zero) *near_zero += zeros;
  return _mm512_add_ps(sum[0], sum[1]);
}

// Passes 1 and 2 in one: E[j*16 + lane] = 2^S over keys [0, RoundUp(b.nk)),
// not shifted by the lane's max (the softmax does not change under a
// shift), zero where the lane does not see the key; returns each lane's
// sum. The exponentials are taken while the scores are in registers: no
// max, no second pass over S. Valid when FusedSumsInRange.
template <int hd>
TIERKV_LANES __m512 ScoresExp(const float* qt, const float* k, const BlockShape& b, float* E) {
  const int nk = static_cast<int>(RoundUp(b.nk));
  __m512 sum[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  int j0 = 0;
  for (; j0 + kTile <= b.np; j0 += kTile) {  // prefix keys: seen by every lane
    __m512 acc[kTile];
    TileScores<hd>(qt, k, j0, acc);
#pragma GCC unroll 8
    for (int u = 0; u < kTile; ++u) {
      const __m512 e = Exp2(acc[u]);
      _mm512_storeu_ps(E + (j0 + u) * kLanes, e);
      sum[u & 1] = _mm512_add_ps(sum[u & 1], e);
    }
  }
  for (; j0 < nk; j0 += kTile) {
    __m512 acc[kTile];
    TileScores<hd>(qt, k, j0, acc);
    for (int u = 0; u < kTile; ++u) {
      const int j = j0 + u;
      const __mmask16 seen = j < b.np ? __mmask16(0xFFFF) : j < b.nk ? Sees(b.i0, j - b.np) : 0;
      const __m512 e = _mm512_maskz_mov_ps(seen, Exp2(acc[u]));
      _mm512_storeu_ps(E + j * kLanes, e);
      sum[0] = _mm512_add_ps(sum[0], e);
    }
  }
  return _mm512_add_ps(sum[0], sum[1]);
}

// Whether every real lane's unshifted sum lies in [2^-64, 2^64]: then the
// lane's largest score is at most 64 and at least -64 - log2(keys), so its
// weights down to 2^-50 of the largest are normal floats (smaller ones may
// round to denormals or 0, far below the sum's resolution). Outside (a
// score overflowed to inf, or every weight vanished) the block is done again
// by the two-pass path, shifted by the max.
TIERKV_LANES inline bool FusedSumsInRange(__m512 sum, __mmask16 real) {
  const __mmask16 low = _mm512_mask_cmp_ps_mask(real, sum, _mm512_set1_ps(0x1p-64f), _CMP_GE_OQ);
  const __mmask16 high = _mm512_mask_cmp_ps_mask(real, sum, _mm512_set1_ps(0x1p64f), _CMP_LE_OQ);
  return (low & high) == real;
}

// Passes 1 and 2 for a block: e (zero where hidden) in E and each lane's
// sum. The fused pass unless the near-zero count is wanted (it is relative
// to each lane's max, which only the two-pass path knows) or a real lane's
// sum says a score left its range (the block is then done again).
template <int hd>
TIERKV_LANES __m512 Weights(const BlockShape& b, const float* qt, const float* k, uint64_t* near_zero,
                            float* E) {
  const __mmask16 real = static_cast<__mmask16>((1u << b.rows) - 1);
  if (!near_zero) {
    const __m512 sum = ScoresExp<hd>(qt, k, b, E);
    if (FusedSumsInRange(sum, real)) return sum;
  }
  const __m512 m = Scores<hd>(qt, k, static_cast<int>(RoundUp(b.nk)), b.np, b.i0, E);
  return Exponentials(b, m, E, near_zero);
}

// Pass 3. out rows i0.. (real lanes) = sum_j e[j] V[j] / sum.
TIERKV_LANES void WeightedValues(const BlockShape& b, const float* E, const float* v, int hd,
                                  const float* inv, float* out, size_t out_stride) {
  alignas(64) float o_t[kLanes * kLanes];  // o_t[d][lane] for 16 dimensions
  for (int d0 = 0; d0 < hd; d0 += kLanes) {
    __m512 acc[kLanes];
    for (auto& a : acc) a = _mm512_setzero_ps();
    const float* vr = v + d0;
    for (int j = 0; j < b.nk; ++j, vr += hd) {
      const __m512 e = _mm512_loadu_ps(E + j * kLanes);
      for (int u = 0; u < kLanes; ++u) acc[u] = _mm512_fmadd_ps(e, _mm512_set1_ps(vr[u]), acc[u]);
    }
    for (int u = 0; u < kLanes; ++u) _mm512_store_ps(o_t + u * kLanes, acc[u]);
    for (int r = 0; r < b.rows; ++r) {
      float* o = out + static_cast<size_t>(b.i0 + r) * out_stride + d0;
      for (int u = 0; u < kLanes; ++u) o[u] = o_t[u * kLanes + r] * inv[r];
    }
  }
}

// colsum[j] += the sum over lanes of e[j][lane] * inv[lane], for j in [0, n).
TIERKV_LANES void AddLaneSums(const float* e, const float* inv, int n, float* colsum) {
  const __m512 vinv = _mm512_load_ps(inv);
  auto weighted = [&](int j) TIERKV_LANES { return _mm512_mul_ps(_mm512_loadu_ps(e + j * kLanes), vinv); };
  int j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    // A reduction tree: pairs of rows interleaved by 32, then 64, then 128
    // bits leave row r's sum in lane r.
    __m512 a[kLanes];
    for (int u = 0; u < kLanes; ++u) a[u] = weighted(j + u);
    for (int u = 0; u < 8; ++u) {
      a[u] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * u], a[2 * u + 1]),
                           _mm512_unpackhi_ps(a[2 * u], a[2 * u + 1]));
    }
    for (int u = 0; u < 4; ++u) {
      const __m512d x = _mm512_castps_pd(a[2 * u]), y = _mm512_castps_pd(a[2 * u + 1]);
      a[u] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                           _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    for (int u = 0; u < 2; ++u) {
      a[u] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * u], a[2 * u + 1], 0x88),
                           _mm512_shuffle_f32x4(a[2 * u], a[2 * u + 1], 0xDD));
    }
    const __m512 r = _mm512_add_ps(_mm512_shuffle_f32x4(a[0], a[1], 0x88),
                                   _mm512_shuffle_f32x4(a[0], a[1], 0xDD));
    _mm512_storeu_ps(colsum + j, _mm512_add_ps(_mm512_loadu_ps(colsum + j), r));
  }
  for (; j < n; ++j) {
    const __m512 x = weighted(j);
    colsum[j] += HorizontalSum(_mm256_add_ps(Lo256(x), Hi256(x)));
  }
}

// Keys (and, with values, the values) of prefix rows then new rows as dense
// fp32 rows of head_dim; keys padded with zero rows to a multiple of 16.
void DenseRows(const AttentionArgs& a, AttentionScratch* s) {
  const int hd = a.head_dim;
  const size_t np = a.prefix.count, T = static_cast<size_t>(a.n_new), h = static_cast<size_t>(hd);
  s->kp.resize(RoundUp(np + T) * h);
  GatherRows(a.prefix.k, a.prefix.dtype, np, a.prefix.k_stride, hd, s->kp.data());
  GatherRows(a.k_new, KvDType::kF32, T, a.kv_new_stride, hd, s->kp.data() + np * h);
  std::fill(s->kp.begin() + static_cast<ptrdiff_t>((np + T) * h), s->kp.end(), 0.0f);
  if (!a.out) return;
  s->vp.resize((np + T) * h);
  GatherRows(a.prefix.v, a.prefix.dtype, np, a.prefix.v_stride, hd, s->vp.data());
  GatherRows(a.v_new, KvDType::kF32, T, a.kv_new_stride, hd, s->vp.data() + np * h);
}

// Passes 1-3 for one block of new tokens of query head g: leaves the
// exponentials in S and 1/sum per lane (0 for lanes past n_new) in inv.
TIERKV_LANES void AttendBlock(const AttentionArgs& a, int g, const BlockShape& b,
                              AttentionScratch* s, float* S, float* inv) {
  const int hd = a.head_dim;
  // Scores in log2 units: 2^(x log2 e) = e^x.
  const float scale = 1.4426950408889634f / std::sqrt(static_cast<float>(hd));
  alignas(64) float qt[kMaxHeadDim * kLanes];
  for (int d = 0; d < hd; ++d) {
    for (int r = 0; r < kLanes; ++r) {
      qt[d * kLanes + r] =
          r < b.rows ? a.q[static_cast<size_t>(b.i0 + r) * a.q_stride + static_cast<size_t>(g) * hd + d] * scale
                     : 0.0f;
    }
  }
  const __m512 sum = hd == 16   ? Weights<16>(b, qt, s->kp.data(), a.near_zero, S)
                     : hd == 32 ? Weights<32>(b, qt, s->kp.data(), a.near_zero, S)
                     : hd == 64 ? Weights<64>(b, qt, s->kp.data(), a.near_zero, S)
                                : Weights<128>(b, qt, s->kp.data(), a.near_zero, S);
  if (a.weights) {
    for (int r = 0; r < b.rows; ++r) *a.weights += static_cast<uint64_t>(b.np + b.i0 + r + 1);
  }
  const __mmask16 real = static_cast<__mmask16>((1u << b.rows) - 1);
  _mm512_store_ps(inv, _mm512_maskz_div_ps(real, _mm512_set1_ps(1.0f), sum));
  if (a.out) {
    WeightedValues(b, S, s->vp.data(), hd, inv, a.out + static_cast<size_t>(g) * hd, a.out_stride);
  }
}

// One query head of the group, a block of 16 new tokens at a time.
TIERKV_LANES void AttendHead(const AttentionArgs& a, int g, AttentionScratch* s) {
  const int T = a.n_new, np = static_cast<int>(a.prefix.count);
  float* colsum = a.colsum ? a.colsum + static_cast<size_t>(g) * np : nullptr;
  alignas(64) float inv[kLanes];
  for (int i0 = 0; i0 < T; i0 += kLanes) {
    const BlockShape b{np, i0, std::min(kLanes, T - i0), np + std::min(T, i0 + kLanes)};
    AttendBlock(a, g, b, s, s->scores.data(), inv);
    if (colsum) AddLaneSums(s->scores.data(), inv, np, colsum);
  }
}

}  // namespace

bool LanesServe(const AttentionArgs& a) {
  const int hd = a.head_dim;
  return HasAvx512() && (hd == 16 || hd == 32 || hd == 64 || hd == 128) &&
         a.n_new >= kMinRows;
}

void AttendLanes(const AttentionArgs& a, AttentionScratch* scratch) {
  DenseRows(a, scratch);
  scratch->scores.resize(RoundUp(a.prefix.count + static_cast<size_t>(a.n_new)) * kLanes);
  for (int g = 0; g < a.group; ++g) AttendHead(a, g, scratch);
}

}  // namespace tierkv::kernels

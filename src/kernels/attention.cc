// Three paths. Many query rows (prefill): blocks of 128 rows, scores and
// weighted values as matrix products (oneDNN keeps ~145 GFLOP/s per core even
// at an inner dimension of 16), vectorized softmax between them. Few rows
// (a few tokens): keys transposed once (KT[d][j]) and scores computed 64 keys
// at a time with broadcast-FMA, where a matrix product would be a slow
// matrix-vector one. One row (decode): the prefix rows read in place, 64 at a
// time, shared by the group's query heads. Explicit AVX2/FMA code (chosen
// once at run time) with a portable scalar fallback. Numbers: docs/engine.md.
#include "kernels/attention.h"


#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention_lanes.h"
#include "kernels/fp16.h"
#include "kernels/matmul.h"
#include "kernels/simd_math.h"
#include "kernels/vec_math.h"

namespace tierkv::kernels {
namespace {

constexpr int kKeyBlock = 64;    // keys per score tile; KT rows are padded to it
constexpr int kRowBlock = 128;   // query rows per matrix-product block
constexpr int kMinGemmRows = 16;  // fewer new rows take the row-at-a-time path

// ---- portable versions ----

void ScoresScalar(const float* q, const float* kt, size_t ldk, int hd, int n, float scale,
                  float* s) {
  std::fill(s, s + n, 0.0f);
  for (int d = 0; d < hd; ++d) {
    const float qd = q[d] * scale;
    const float* k = kt + static_cast<size_t>(d) * ldk;
    for (int j = 0; j < n; ++j) s[j] += qd * k[j];
  }
}

float SoftmaxScalar(float* s, int n) {
  float mx = s[0];
  for (int j = 1; j < n; ++j) mx = std::max(mx, s[j]);
  float sum = 0.0f;
  for (int j = 0; j < n; ++j) sum += (s[j] = FastExp(s[j] - mx));
  return sum;
}

void WeightedValuesScalar(const float* p, const float* v, int hd, int n, float inv, float* out) {
  std::fill(out, out + hd, 0.0f);
  for (int j = 0; j < n; ++j) {
    const float pj = p[j];
    const float* vj = v + static_cast<size_t>(j) * hd;
    for (int d = 0; d < hd; ++d) out[d] += pj * vj[d];
  }
  for (int d = 0; d < hd; ++d) out[d] *= inv;
}

// ---- AVX2 + FMA versions ----


TIERKV_AVX2 void ScoresAvx2(const float* q, const float* kt, size_t ldk, int hd, int n,
                            float scale, float* s) {
  for (int j0 = 0; j0 < n; j0 += kKeyBlock) {
    __m256 acc[8];
    for (auto& a : acc) a = _mm256_setzero_ps();
    const float* k = kt + j0;
    for (int d = 0; d < hd; ++d, k += ldk) {
      const __m256 qd = _mm256_set1_ps(q[d] * scale);
      for (int u = 0; u < 8; ++u) acc[u] = _mm256_fmadd_ps(qd, _mm256_loadu_ps(k + 8 * u), acc[u]);
    }
    // Full tiles are written even past n: s has room for the padded length.
    for (int u = 0; u < 8; ++u) _mm256_storeu_ps(s + j0 + 8 * u, acc[u]);
  }
}

// Unnormalised softmax: s[j] = exp(s[j] - max); returns the sum.
TIERKV_AVX2 float SoftmaxAvx2(float* s, int n) {
  int j = 0;
  __m256 vmax = _mm256_set1_ps(s[0]);
  for (; j + 8 <= n; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + j));
  float mx = HorizontalMax(vmax);
  for (; j < n; ++j) mx = std::max(mx, s[j]);
  const __m256 vm = _mm256_set1_ps(mx);
  __m256 vsum = _mm256_setzero_ps();
  j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
    _mm256_storeu_ps(s + j, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = HorizontalSum(vsum);
  for (; j < n; ++j) sum += (s[j] = FastExp(s[j] - mx));
  return sum;
}


// As SoftmaxAvx2, 16 lanes wide: in long prefills exp is the bottleneck.
TIERKV_AVX512 float SoftmaxAvx512(float* s, int n) {
  int j = 0;
  __m512 vmax = _mm512_set1_ps(s[0]);
  for (; j + 16 <= n; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(s + j));
  float mx = HorizontalMax(_mm256_max_ps(Lo256(vmax), Hi256(vmax)));
  for (; j < n; ++j) mx = std::max(mx, s[j]);
  const __m512 vm = _mm512_set1_ps(mx);
  __m512 vsum = _mm512_setzero_ps();
  j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm));
    _mm512_storeu_ps(s + j, e);
    vsum = _mm512_add_ps(vsum, e);
  }
  float sum = HorizontalSum(_mm256_add_ps(Lo256(vsum), Hi256(vsum)));
  for (; j < n; ++j) sum += (s[j] = FastExp(s[j] - mx));
  return sum;
}

// out = inv * sum_j p[j] V[j]; REQUIRES hd % 8 == 0. Four accumulator sets of
// up to 32 columns hide the FMA latency.
TIERKV_AVX2 void WeightedValuesAvx2(const float* p, const float* v, int hd, int n, float inv,
                                    float* out) {
  for (int d0 = 0; d0 < hd; d0 += 32) {
    const int nv = std::min(4, (hd - d0) / 8);
    __m256 acc[4][4];
    for (auto& row : acc) {
      for (auto& a : row) a = _mm256_setzero_ps();
    }
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      for (int u = 0; u < 4; ++u) {
        const __m256 pj = _mm256_set1_ps(p[j + u]);
        const float* vj = v + static_cast<size_t>(j + u) * hd + d0;
        for (int c = 0; c < nv; ++c) {
          acc[u][c] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * c), acc[u][c]);
        }
      }
    }
    for (; j < n; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      const float* vj = v + static_cast<size_t>(j) * hd + d0;
      for (int c = 0; c < nv; ++c) acc[0][c] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * c), acc[0][c]);
    }
    const __m256 vinv = _mm256_set1_ps(inv);
    for (int c = 0; c < nv; ++c) {
      const __m256 sum = _mm256_add_ps(_mm256_add_ps(acc[0][c], acc[1][c]),
                                       _mm256_add_ps(acc[2][c], acc[3][c]));
      _mm256_storeu_ps(out + d0 + 8 * c, _mm256_mul_ps(sum, vinv));
    }
  }
}

bool UseAvx2() {
  static const bool use = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return use;
}

bool UseAvx512() {
  static const bool use = __builtin_cpu_supports("avx512f");
  return use;
}

// Unnormalised softmax in place; returns the sum.
float Softmax(float* s, int n) {
  if (UseAvx512()) return SoftmaxAvx512(s, n);
  if (UseAvx2()) return SoftmaxAvx2(s, n);
  return SoftmaxScalar(s, n);
}

}  // namespace

void GatherRows(const void* src, KvDType dtype, size_t count, size_t stride, int head_dim,
                float* dst) {
  const size_t hd = static_cast<size_t>(head_dim);
  if (count == 0) return;  // src may be null
  if (stride == 0) stride = hd;
  if (dtype == KvDType::kF32) {
    const float* s = static_cast<const float*>(src);
    if (stride == hd) {
      std::memcpy(dst, s, count * hd * sizeof(float));
    } else {
      for (size_t i = 0; i < count; ++i) std::memcpy(dst + i * hd, s + i * stride, hd * 4);
    }
  } else {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    HalfToFloatRows(s, stride, count, hd, dst);
  }
}

namespace {

// The softmax rows here hold exp(s - max): the row's maximum weight is 1.
void CountNearZero(const float* e, int n, uint64_t* weights, uint64_t* near_zero) {
  uint64_t z = 0;
  for (int j = 0; j < n; ++j) z += e[j] < 0.01f;
  *weights += static_cast<uint64_t>(n);
  *near_zero += z;
}

// ---- one new row (decode): the prefix rows read in place ----

constexpr int kRowBlockKeys = 64;  // prefix rows converted to fp32 at a time (L1-sized)

// s[j] = scale * q . k_j for n rows of k (hd floats, row j at k + j*ldk), 4
// rows per step with one horizontal reduction for the 4. REQUIRES hd % 8 == 0.
TIERKV_AVX2 void RowScoresAvx2(const float* q, const float* k, size_t ldk, int hd, int n, float scale,
                               float* s) {
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int d = 0; d < hd; d += 8) {
      const __m256 qv = _mm256_loadu_ps(q + d);
      for (int r = 0; r < 4; ++r) {
        acc[r] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + (j + r) * ldk + d), acc[r]);
      }
    }
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
    const __m128 sum = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    _mm_storeu_ps(s + j, _mm_mul_ps(sum, _mm_set1_ps(scale)));
  }
  for (; j < n; ++j) {
    __m256 acc = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 8) {
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + j * ldk + d), acc);
    }
    s[j] = HorizontalSum(acc) * scale;
  }
}

// acc += sum_j p[j] v_j over n rows of v (hd floats, row j at v + j*ldv).
// REQUIRES hd % 8 == 0.
TIERKV_AVX2 void RowValuesAvx2(const float* p, const float* v, size_t ldv, int hd, int n, float* acc) {
  for (int d0 = 0; d0 < hd; d0 += 32) {
    const int nv = std::min(4, (hd - d0) / 8);
    __m256 a[4];
    for (int c = 0; c < nv; ++c) a[c] = _mm256_loadu_ps(acc + d0 + 8 * c);
    for (int j = 0; j < n; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      const float* vj = v + j * ldv + d0;
      for (int c = 0; c < nv; ++c) a[c] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * c), a[c]);
    }
    for (int c = 0; c < nv; ++c) _mm256_storeu_ps(acc + d0 + 8 * c, a[c]);
  }
}

// One new row over the prefix: the prefix's K and V are read once each, in
// place (fp32) or a block of kRowBlockKeys rows at a time converted to fp32
// (fp16), and used by every query head of the group, where AttendRows would
// transpose and convert the whole prefix first (that copy, not the
// arithmetic, was a decode step's attention time). REQUIRES a.n_new == 1,
// UseAvx2(), head_dim % 8 == 0.
void AttendOneRow(const AttentionArgs& a, AttentionScratch* scratch) {
  const int hd = a.head_dim, G = a.group;
  const int np = static_cast<int>(a.prefix.count), n = np + 1;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const KvRows& pre = a.prefix;
  const bool f16 = pre.dtype == KvDType::kF16;
  std::vector<float>& block = scratch->kp;
  if (f16) block.resize(static_cast<size_t>(kRowBlockKeys) * hd);
  // Rows [j0, j0 + B) of the prefix's K (or V) as fp32 rows `*ld` apart.
  auto rows = [&](const void* base, size_t stride, int j0, int B, size_t* ld) -> const float* {
    if (stride == 0) stride = static_cast<size_t>(hd);
    if (!f16) {
      *ld = stride;
      return static_cast<const float*>(base) + j0 * stride;
    }
    GatherRows(static_cast<const uint16_t*>(base) + j0 * stride, pre.dtype, B, stride, hd, block.data());
    *ld = static_cast<size_t>(hd);
    return block.data();
  };
  // G rows of n scores, G accumulators of hd, G inverse sums.
  std::vector<float>& s = scratch->scores;
  const size_t ld = static_cast<size_t>(n + 7) / 8 * 8;
  s.resize(G * ld + static_cast<size_t>(G) * (hd + 1));
  for (int j0 = 0; j0 < np; j0 += kRowBlockKeys) {
    const int B = std::min(kRowBlockKeys, np - j0);
    size_t ldk;
    const float* k = rows(pre.k, pre.k_stride, j0, B, &ldk);
    for (int g = 0; g < G; ++g) RowScoresAvx2(a.q + static_cast<size_t>(g) * hd, k, ldk, hd, B, scale, &s[g * ld + j0]);
  }
  float* inv = &s[G * ld + static_cast<size_t>(G) * hd];
  for (int g = 0; g < G; ++g) {
    float* row = &s[g * ld];
    RowScoresAvx2(a.q + static_cast<size_t>(g) * hd, a.k_new, 0, hd, 1, scale, row + np);
    inv[g] = 1.0f / Softmax(row, n);
    if (a.colsum) {
      float* colsum = a.colsum + static_cast<size_t>(g) * np;
      for (int j = 0; j < np; ++j) colsum[j] += row[j] * inv[g];
    }
    if (a.near_zero) CountNearZero(row, n, a.weights, a.near_zero);
  }
  if (!a.out) return;
  float* acc = &s[G * ld];
  std::fill(acc, acc + static_cast<size_t>(G) * hd, 0.0f);
  for (int j0 = 0; j0 < np; j0 += kRowBlockKeys) {
    const int B = std::min(kRowBlockKeys, np - j0);
    size_t ldv;
    const float* v = rows(pre.v, pre.v_stride, j0, B, &ldv);
    for (int g = 0; g < G; ++g) RowValuesAvx2(&s[g * ld + j0], v, ldv, hd, B, acc + static_cast<size_t>(g) * hd);
  }
  for (int g = 0; g < G; ++g) {
    float* ag = acc + static_cast<size_t>(g) * hd;
    RowValuesAvx2(&s[g * ld + np], a.v_new, 0, hd, 1, ag);
    float* out = a.out + static_cast<size_t>(g) * hd;
    for (int d = 0; d < hd; ++d) out[d] = ag[d] * inv[g];
  }
}

void AttendRows(const AttentionArgs& a, AttentionScratch* scratch) {
  const int T = a.n_new;
  const int hd = a.head_dim;
  const int np = static_cast<int>(a.prefix.count);
  const int n_all = np + T;
  const size_t ldk = (static_cast<size_t>(n_all) + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const bool avx2 = UseAvx2() && hd % 8 == 0;

  // Keys of prefix rows then new rows, transposed: KT[d][j]. Values row-major.
  std::vector<float>& kt = scratch->kp;
  std::vector<float>& v = scratch->vp;
  kt.assign(static_cast<size_t>(hd) * ldk, 0.0f);
  v.resize(static_cast<size_t>(n_all) * hd);
  std::vector<float>& rows = scratch->scores;
  rows.resize(std::max(static_cast<size_t>(np) * hd, ldk));
  if (np > 0) {
    GatherRows(a.prefix.k, a.prefix.dtype, np, a.prefix.k_stride, hd, rows.data());
    for (int j = 0; j < np; ++j) {
      for (int d = 0; d < hd; ++d) kt[static_cast<size_t>(d) * ldk + j] = rows[static_cast<size_t>(j) * hd + d];
    }
    if (a.out) GatherRows(a.prefix.v, a.prefix.dtype, np, a.prefix.v_stride, hd, v.data());
  }
  for (int i = 0; i < T; ++i) {
    const float* k = a.k_new + static_cast<size_t>(i) * a.kv_new_stride;
    for (int d = 0; d < hd; ++d) kt[static_cast<size_t>(d) * ldk + np + i] = k[d];
    std::memcpy(&v[static_cast<size_t>(np + i) * hd], a.v_new + static_cast<size_t>(i) * a.kv_new_stride,
                static_cast<size_t>(hd) * sizeof(float));
  }

  float* s = rows.data();  // reused as the score row (ldk floats)
  for (int g = 0; g < a.group; ++g) {
    float* colsum = a.colsum ? a.colsum + static_cast<size_t>(g) * np : nullptr;
    for (int i = 0; i < T; ++i) {
      const int n_valid = np + i + 1;  // prefix plus causal new rows
      const float* q = a.q + static_cast<size_t>(i) * a.q_stride + static_cast<size_t>(g) * hd;
      float* out = a.out ? a.out + static_cast<size_t>(i) * a.out_stride + static_cast<size_t>(g) * hd
                         : nullptr;
      float sum;
      if (avx2) {
        ScoresAvx2(q, kt.data(), ldk, hd, n_valid, scale, s);
        sum = SoftmaxAvx2(s, n_valid);
      } else {
        ScoresScalar(q, kt.data(), ldk, hd, n_valid, scale, s);
        sum = SoftmaxScalar(s, n_valid);
      }
      const float inv = 1.0f / sum;
      if (colsum) {
        for (int j = 0; j < np; ++j) colsum[j] += s[j] * inv;
      }
      if (a.near_zero) CountNearZero(s, n_valid, a.weights, a.near_zero);
      if (!out) {
        continue;
      } else if (avx2) {
        WeightedValuesAvx2(s, v.data(), hd, n_valid, inv, out);
      } else {
        WeightedValuesScalar(s, v.data(), hd, n_valid, inv, out);
      }
    }
  }
}


void AttendBlocks(const AttentionArgs& a, AttentionScratch* scratch) {
  const int T = a.n_new;
  const int hd = a.head_dim;
  const int np = static_cast<int>(a.prefix.count);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  if (np > 0) {
    scratch->kp.resize(static_cast<size_t>(np) * hd);
    scratch->vp.resize(static_cast<size_t>(np) * hd);
    GatherRows(a.prefix.k, a.prefix.dtype, np, a.prefix.k_stride, hd, scratch->kp.data());
    if (a.out) GatherRows(a.prefix.v, a.prefix.dtype, np, a.prefix.v_stride, hd, scratch->vp.data());
  }
  const size_t ld = static_cast<size_t>(np) + T;
  scratch->scores.resize(static_cast<size_t>(std::min(T, kRowBlock)) * ld);
  float* S = scratch->scores.data();

  for (int g = 0; g < a.group; ++g) {
    const float* q = a.q + static_cast<size_t>(g) * hd;
    float* out = a.out ? a.out + static_cast<size_t>(g) * hd : nullptr;
    float* colsum = a.colsum ? a.colsum + static_cast<size_t>(g) * np : nullptr;
    for (int i0 = 0; i0 < T; i0 += kRowBlock) {
      const int B = std::min(kRowBlock, T - i0);
      const int visible_new = i0 + B;  // the block's last row sees new rows [0, i0+B)
      const float* qb = q + static_cast<size_t>(i0) * a.q_stride;
      if (np > 0) MatMulNT(B, np, hd, scale, qb, a.q_stride, scratch->kp.data(), hd, 0.0f, S, ld);
      MatMulNT(B, visible_new, hd, scale, qb, a.q_stride, a.k_new, a.kv_new_stride, 0.0f, S + np,
               ld);
      float inv[kRowBlock];
      for (int r = 0; r < B; ++r) {
        float* row = S + static_cast<size_t>(r) * ld;
        const int n_valid = np + i0 + r + 1;  // prefix plus causal new rows
        // Unnormalised weights; the output rows are scaled by 1/sum below,
        // which saves a pass over the block.
        const float sum = Softmax(row, n_valid);
        inv[r] = 1.0f / sum;
        // Masked entries must be zero for the products below.
        std::fill(row + n_valid, row + np + visible_new, 0.0f);
        if (a.near_zero) CountNearZero(row, n_valid, a.weights, a.near_zero);
      }
      if (colsum && np > 0) {
        // colsum += inv · S over the block's rows, as one product: a row at
        // a time, the read-modify-write of colsum is what the loop waits on.
        MatMulNN(1, np, B, 1.0f, inv, B, S, ld, 1.0f, colsum, np);
      }
      if (!out) continue;
      float* ob = out + static_cast<size_t>(i0) * a.out_stride;
      float beta = 0.0f;
      if (np > 0) {
        MatMulNN(B, hd, np, 1.0f, S, ld, scratch->vp.data(), hd, 0.0f, ob, a.out_stride);
        beta = 1.0f;
      }
      MatMulNN(B, hd, visible_new, 1.0f, S + np, ld, a.v_new, a.kv_new_stride, beta, ob,
               a.out_stride);
      for (int r = 0; r < B; ++r) {
        float* o = ob + static_cast<size_t>(r) * a.out_stride;
        for (int d = 0; d < hd; ++d) o[d] *= inv[r];
      }
    }
  }
}

}  // namespace

void AttendKvGroup(const AttentionArgs& a, AttentionScratch* scratch) {
  if (LanesServe(a)) {
    AttendLanes(a, scratch);
  } else if (a.n_new >= kMinGemmRows) {
    AttendBlocks(a, scratch);
  } else if (a.n_new == 1 && UseAvx2() && a.head_dim % 8 == 0) {
    AttendOneRow(a, scratch);
  } else {
    AttendRows(a, scratch);
  }
}

}  // namespace tierkv::kernels

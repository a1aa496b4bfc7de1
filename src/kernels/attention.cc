#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/fp16.h"
#include "kernels/matmul.h"

namespace tierkv::kernels {
namespace {

// Query rows per block: bounds the score buffer to kBlock × (prefix + new).
constexpr int kBlock = 128;

}  // namespace

void GatherRows(const void* src, KvDType dtype, size_t count, size_t stride, int head_dim,
                float* dst) {
  const size_t hd = static_cast<size_t>(head_dim);
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
    if (stride == hd) {
      HalfToFloatN(s, dst, count * hd);
    } else {
      for (size_t i = 0; i < count; ++i) HalfToFloatN(s + i * stride, dst + i * hd, hd);
    }
  }
}

void AttendKvGroup(const AttentionArgs& a, AttentionScratch* scratch) {
  const int T = a.n_new;
  const int hd = a.head_dim;
  const int np = static_cast<int>(a.prefix.count);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  if (np > 0) {
    scratch->kp.resize(static_cast<size_t>(np) * hd);
    scratch->vp.resize(static_cast<size_t>(np) * hd);
    GatherRows(a.prefix.k, a.prefix.dtype, np, a.prefix.k_stride, hd, scratch->kp.data());
    GatherRows(a.prefix.v, a.prefix.dtype, np, a.prefix.v_stride, hd, scratch->vp.data());
  }
  const size_t ld = static_cast<size_t>(np) + T;
  scratch->scores.resize(static_cast<size_t>(std::min(T, kBlock)) * ld);
  float* S = scratch->scores.data();

  for (int g = 0; g < a.group; ++g) {
    const float* q = a.q + static_cast<size_t>(g) * hd;
    float* out = a.out + static_cast<size_t>(g) * hd;
    float* colsum = a.colsum ? a.colsum + static_cast<size_t>(g) * np : nullptr;
    for (int i0 = 0; i0 < T; i0 += kBlock) {
      const int B = std::min(kBlock, T - i0);
      const int visible_new = i0 + B;  // the block's last row sees new rows [0, i0+B)
      const float* qb = q + static_cast<size_t>(i0) * a.q_stride;
      if (np > 0) {
        MatMulNT(B, np, hd, scale, qb, a.q_stride, scratch->kp.data(), hd, 0.0f, S, ld);
      }
      MatMulNT(B, visible_new, hd, scale, qb, a.q_stride, a.k_new, a.kv_new_stride, 0.0f, S + np,
               ld);
      for (int r = 0; r < B; ++r) {
        float* row = S + static_cast<size_t>(r) * ld;
        const int n_valid = np + i0 + r + 1;  // prefix plus causal new rows
        float mx = -std::numeric_limits<float>::infinity();
        for (int j = 0; j < n_valid; ++j) mx = std::max(mx, row[j]);
        float sum = 0.0f;
        for (int j = 0; j < n_valid; ++j) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        const float inv = 1.0f / sum;
        for (int j = 0; j < n_valid; ++j) row[j] *= inv;
        // Masked entries must be zero for the P·V products below.
        std::fill(row + n_valid, row + np + visible_new, 0.0f);
        if (colsum) {
          for (int j = 0; j < np; ++j) colsum[j] += row[j];
        }
      }
      float* ob = out + static_cast<size_t>(i0) * a.out_stride;
      float beta = 0.0f;
      if (np > 0) {
        MatMulNN(B, hd, np, 1.0f, S, ld, scratch->vp.data(), hd, 0.0f, ob, a.out_stride);
        beta = 1.0f;
      }
      MatMulNN(B, hd, visible_new, 1.0f, S + np, ld, a.v_new, a.kv_new_stride, beta, ob,
               a.out_stride);
    }
  }
}

}  // namespace tierkv::kernels

// Attention over a selected subset of prefix rows, given in any order, must
// equal dense attention over all rows with the unselected ones masked out.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <utility>

#include "kernels/attention_lanes.h"
#include "kernels/fp16.h"

namespace tierkv::kernels {
namespace {

struct Case {
  int n_prefix, n_new, head_dim, group;
  // Scores far from the usual range: q multiplied by q_scale, and every
  // key's dimension 0 raised by `bias` while every query's is -bias (each
  // score then falls by about bias^2 / sqrt(head_dim)).
  float q_scale = 1.0f, bias = 0.0f;
  // Output tolerance: a score's rounding grows with its magnitude.
  double tol = 2e-5;
};

// Dense reference in double: every prefix row j with mask[j] is visible, plus
// causal new rows. Returns out[g][i][d] and colsum[g][j] over all prefix rows,
// and counts the weights, and those below 1% of their row's maximum.
void Reference(const Case& c, const std::vector<float>& q, const std::vector<float>& kp,
               const std::vector<float>& vp, const std::vector<float>& kn,
               const std::vector<float>& vn, const std::vector<char>& mask,
               std::vector<double>* out, std::vector<double>* colsum, uint64_t* weights,
               uint64_t* near_zero) {
  const int hd = c.head_dim;
  out->assign(static_cast<size_t>(c.group) * c.n_new * hd, 0.0);
  colsum->assign(static_cast<size_t>(c.group) * c.n_prefix, 0.0);
  for (int g = 0; g < c.group; ++g) {
    for (int i = 0; i < c.n_new; ++i) {
      const float* qi = &q[(static_cast<size_t>(i) * c.group + g) * hd];
      std::vector<double> s;
      std::vector<const float*> vs;
      std::vector<int> idx;
      auto add = [&](const float* k, const float* v, int j) {
        double d = 0;
        for (int e = 0; e < hd; ++e) d += static_cast<double>(qi[e]) * k[e];
        s.push_back(d / std::sqrt(static_cast<double>(hd)));
        vs.push_back(v);
        idx.push_back(j);
      };
      for (int j = 0; j < c.n_prefix; ++j) {
        if (mask[j]) add(&kp[static_cast<size_t>(j) * hd], &vp[static_cast<size_t>(j) * hd], j);
      }
      for (int j = 0; j <= i; ++j) add(&kn[static_cast<size_t>(j) * hd], &vn[static_cast<size_t>(j) * hd], -1);
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double& x : s) {
        sum += (x = std::exp(x - mx));
        *near_zero += x < 0.01;
      }
      *weights += s.size();
      for (size_t t = 0; t < s.size(); ++t) {
        const double p = s[t] / sum;
        for (int e = 0; e < hd; ++e) (*out)[(static_cast<size_t>(g) * c.n_new + i) * hd + e] += p * vs[t][e];
        if (idx[t] >= 0) (*colsum)[static_cast<size_t>(g) * c.n_prefix + idx[t]] += p;
      }
    }
  }
}

void RunCase(const Case& c, KvDType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int hd = c.head_dim;
  auto randv = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng);
    return v;
  };
  std::vector<float> q = randv(static_cast<size_t>(c.n_new) * c.group * hd);
  std::vector<float> kp = randv(static_cast<size_t>(c.n_prefix) * hd);
  std::vector<float> vp = randv(kp.size());
  std::vector<float> kn = randv(static_cast<size_t>(c.n_new) * hd);
  std::vector<float> vn = randv(kn.size());
  for (float& x : q) x *= c.q_scale;
  if (c.bias != 0) {
    for (size_t i = 0; i < q.size(); i += hd) q[i] = -c.bias;
    for (auto* k : {&kp, &kn}) {
      for (size_t i = 0; i < k->size(); i += hd) (*k)[i] += c.bias;
    }
  }
  if (dtype == KvDType::kF16) {  // the reference sees exactly what fp16 storage holds
    for (auto* v : {&kp, &vp}) {
      for (float& x : *v) x = HalfToFloat(FloatToHalf(x));
    }
  }
  // Select a random subset, then store it in shuffled order.
  std::vector<char> mask(c.n_prefix);
  std::vector<int32_t> sel;
  for (int j = 0; j < c.n_prefix; ++j) {
    mask[j] = (rng() % 3) != 0;
    if (mask[j]) sel.push_back(j);
  }
  std::shuffle(sel.begin(), sel.end(), rng);
  const size_t stride = hd + 3;  // rows padded, to exercise strides
  std::vector<float> ks(sel.size() * stride), vsel(sel.size() * stride);
  std::vector<uint16_t> ks16(ks.size()), vs16(ks.size());
  for (size_t r = 0; r < sel.size(); ++r) {
    for (int e = 0; e < hd; ++e) {
      ks[r * stride + e] = kp[static_cast<size_t>(sel[r]) * hd + e];
      vsel[r * stride + e] = vp[static_cast<size_t>(sel[r]) * hd + e];
    }
  }
  FloatToHalfN(ks.data(), ks16.data(), ks.size());
  FloatToHalfN(vsel.data(), vs16.data(), vsel.size());

  AttentionArgs a;
  a.n_new = c.n_new;
  a.head_dim = hd;
  a.group = c.group;
  a.q = q.data();
  a.q_stride = static_cast<size_t>(c.group) * hd;
  a.k_new = kn.data();
  a.v_new = vn.data();
  a.kv_new_stride = hd;
  a.prefix.dtype = dtype;
  a.prefix.k = dtype == KvDType::kF32 ? static_cast<const void*>(ks.data()) : ks16.data();
  a.prefix.v = dtype == KvDType::kF32 ? static_cast<const void*>(vsel.data()) : vs16.data();
  a.prefix.count = sel.size();
  a.prefix.k_stride = a.prefix.v_stride = stride;
  a.prefix.positions = sel.data();
  std::vector<float> out(static_cast<size_t>(c.n_new) * c.group * hd, -1.0f);
  a.out = out.data();
  a.out_stride = static_cast<size_t>(c.group) * hd;
  std::vector<float> colsum(static_cast<size_t>(c.group) * sel.size(), 0.0f);
  a.colsum = colsum.data();
  uint64_t weights = 0, near_zero = 0;
  a.weights = &weights;
  a.near_zero = &near_zero;
  AttentionScratch scratch;
  AttendKvGroup(a, &scratch);
  // Weights only (no output): the same column sums and counts, to the bit.
  {
    AttentionArgs w = a;
    w.out = nullptr;
    std::vector<float> cs(colsum.size(), 0.0f);
    w.colsum = cs.data();
    uint64_t wn = 0, wz = 0;
    w.weights = &wn;
    w.near_zero = &wz;
    AttendKvGroup(w, &scratch);
    EXPECT_EQ(cs, colsum);
    EXPECT_EQ(wn, weights);
    EXPECT_EQ(wz, near_zero);
  }

  std::vector<double> ref, ref_colsum;
  uint64_t ref_weights = 0, ref_near_zero = 0;
  Reference(c, q, kp, vp, kn, vn, mask, &ref, &ref_colsum, &ref_weights, &ref_near_zero);
  EXPECT_EQ(weights, ref_weights);
  // The kernel's fast exp may put a weight right at 1% on the other side.
  EXPECT_LE(std::llabs(static_cast<long long>(near_zero) - static_cast<long long>(ref_near_zero)),
            std::max<long long>(2, static_cast<long long>(ref_weights / 1000)));
  // The largest differences from the reference: of the outputs, of the column sums.
  auto errors = [&](const std::vector<float>& o, const std::vector<float>& cs) {
    double e_out = 0, e_cs = 0;
    for (int g = 0; g < c.group; ++g) {
      for (int i = 0; i < c.n_new; ++i) {
        for (int e = 0; e < hd; ++e) {
          const double got = o[(static_cast<size_t>(i) * c.group + g) * hd + e];
          e_out = std::max(e_out, std::fabs(got - ref[(static_cast<size_t>(g) * c.n_new + i) * hd + e]));
        }
      }
      for (size_t r = 0; r < sel.size(); ++r) {
        e_cs = std::max(e_cs, std::fabs(cs[g * sel.size() + r] -
                                        ref_colsum[static_cast<size_t>(g) * c.n_prefix + sel[r]]));
      }
    }
    return std::pair<double, double>(e_out, e_cs);
  };
  const auto [max_err, max_cs_err] = errors(out, colsum);
  EXPECT_LT(max_err, c.tol) << "prefix " << c.n_prefix << " new " << c.n_new << " hd " << hd
                           << " group " << c.group;
  EXPECT_LT(max_cs_err, 2e-4 * std::max(1, c.n_new / 16));

  // Without the near-zero count the lanes kernel may take its fused pass
  // (exponentials not shifted by the max): the same reference holds.
  AttentionArgs f = a;
  std::vector<float> fout(out.size(), -1.0f), fcs(colsum.size(), 0.0f);
  f.out = fout.data();
  f.colsum = fcs.data();
  f.weights = f.near_zero = nullptr;
  AttendKvGroup(f, &scratch);
  const auto [f_err, f_cs_err] = errors(fout, fcs);
  EXPECT_LT(f_err, c.tol) << "without the near-zero count: prefix " << c.n_prefix << " new " << c.n_new
                         << " hd " << hd << " group " << c.group;
  EXPECT_LT(f_cs_err, 2e-4 * std::max(1, c.n_new / 16));
  // Weights only, again without the count: the same column sums to the bit.
  AttentionArgs fw_only = f;
  fw_only.out = nullptr;
  std::vector<float> fcs2(colsum.size(), 0.0f);
  fw_only.colsum = fcs2.data();
  AttendKvGroup(fw_only, &scratch);
  EXPECT_EQ(fcs2, fcs);
}

TEST(AttentionTest, SelectedRowsEqualMaskedDenseReferenceMhaAndGqa) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    Case c;
    c.n_prefix = static_cast<int>(rng() % 300);
    c.n_new = 1 + static_cast<int>(rng() % 300);  // crosses the 128-row block size
    c.head_dim = 2 * (1 + static_cast<int>(rng() % 40));
    c.group = trial % 2 == 0 ? 1 : 1 + static_cast<int>(rng() % 4);
    RunCase(c, trial % 3 == 0 ? KvDType::kF16 : KvDType::kF32, 100 + trial);
  }
}

TEST(AttentionTest, NoPrefixIsPlainCausalAttention) {
  RunCase({0, 200, 16, 1}, KvDType::kF32, 5);
  RunCase({0, 1, 8, 2}, KvDType::kF32, 6);
}

TEST(AttentionTest, SingleQueryRowOverLongPrefix) {
  RunCase({2000, 1, 64, 4}, KvDType::kF32, 7);
  RunCase({2000, 1, 16, 1}, KvDType::kF16, 8);
}

// One new row (a decode step) reads the prefix rows in place, 64 at a time:
// prefixes around multiples of 4 and 64, no prefix, head_dims that are and
// are not multiples of 8 and 32, every GQA group size, fp16 and fp32 rows.
TEST(AttentionTest, OneRowEqualsTheReferenceAtEveryEdge) {
  int seed = 300;
  for (int n_prefix : {0, 1, 3, 4, 5, 63, 64, 65, 129, 700}) {
    for (int hd : {6, 8, 16, 24, 40, 64, 128}) {
      for (int group : {1, 3, 4, 8}) {
        RunCase({n_prefix, 1, hd, group}, seed % 2 ? KvDType::kF16 : KvDType::kF32, seed);
        ++seed;
      }
    }
  }
  Case huge{300, 1, 64, 4};
  huge.q_scale = 30.0f;
  huge.tol = 1e-3;
  RunCase(huge, KvDType::kF16, 7);
}

// The lanes kernel (AVX-512, queries across lanes) at the shapes where its
// blocks of 16 new tokens, its 16-key score tiles and its causal masks have
// edges: new rows around multiples of 16, prefixes not a multiple of 16, no
// prefix, every head_dim it takes, GQA, fp16 and fp32 rows.
// The side kernel's shape (45 new rows, head_dim 16) on this CPU.
bool LanesKernelHere() {
  AttentionArgs a;
  a.head_dim = 16;
  a.n_new = 45;
  return LanesServe(a);
}

TEST(AttentionTest, LanesKernelEqualsTheReferenceAtEveryEdge) {
  if (!LanesKernelHere()) GTEST_SKIP() << "this CPU has no AVX-512: the lanes kernel is not used";
  uint32_t seed = 300;
  for (int hd : {16, 32, 64, 128}) {
    for (int n_new : {2, 15, 16, 17, 45, 64}) {
      for (int n_prefix : {0, 1, 17, 100}) {
        RunCase({n_prefix, n_new, hd, hd == 32 ? 3 : 1}, seed % 2 ? KvDType::kF16 : KvDType::kF32, seed);
        ++seed;
      }
    }
  }
  // Long prefixes and prompts (the side kernel's and a prefill's shapes).
  RunCase({675, 45, 16, 1}, KvDType::kF16, 1);
  RunCase({0, 700, 16, 1}, KvDType::kF32, 2);
  RunCase({300, 130, 64, 2}, KvDType::kF16, 3);
}

// The fused pass takes 2^score unshifted; scores whose sums leave its range
// (any score above ~64 in log2 units overflows, or every weight of a row
// vanishes) must send the block to the two-pass path, which shifts by the max.
TEST(AttentionTest, LanesKernelIsExactWhenScoresLeaveTheFusedRange) {
  if (!LanesKernelHere()) GTEST_SKIP() << "this CPU has no AVX-512: the lanes kernel is not used";
  uint32_t seed = 900;
  for (int hd : {16, 64}) {
    for (int n_new : {2, 17, 45}) {
      Case huge{100, n_new, hd, 1};
      huge.q_scale = 40;  // scores of hundreds: 2^score is inf
      huge.tol = 1e-4;
      RunCase(huge, KvDType::kF16, seed++);
      Case low{100, n_new, hd, 1};
      low.bias = 20;  // every score near -400 / sqrt(hd): every 2^score is 0
      RunCase(low, KvDType::kF32, seed++);
    }
  }
}

TEST(AttentionTest, LanesKernelServesOnlyWhatItCan) {
  if (!LanesKernelHere()) GTEST_SKIP() << "this CPU has no AVX-512: the lanes kernel is not used";
  AttentionArgs a;
  a.head_dim = 16;
  a.n_new = 1;  // one row: the row kernel
  EXPECT_FALSE(LanesServe(a));
  a.n_new = 2;
  EXPECT_TRUE(LanesServe(a));
  for (int hd : {8, 24, 48, 80, 256}) {
    a.head_dim = hd;
    EXPECT_FALSE(LanesServe(a)) << hd;
  }
}

}  // namespace
}  // namespace tierkv::kernels

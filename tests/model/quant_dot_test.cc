// In-type products (model/quant_dot.h): each equals the sum over the row of
// dequantized weight × dequantized activation (the integer sums are exact, so
// only fp32 rounding separates them), the AVX2 kernels agree with the
// portable ones, and the quantized activations stay within 8-bit rounding of
// the floats they came from.
#include "model/quant_dot.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/fp16.h"
#include "model/dequant_avx2.h"
#include "model/quant.h"
#include "model/quant_pack.h"

namespace tierkv::model {
namespace {

const GgmlType kTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ4_K,
                           GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kF16,  GgmlType::kBF16};

std::vector<float> Normal(size_t n, std::mt19937* rng, float scale = 1.f) {
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(*rng);
  return v;
}

// The activations' values as the kernels see them.
std::vector<float> DequantizedActivations(ActFormat f, const uint8_t* q, int cols) {
  std::vector<float> out(cols);
  if (f == ActFormat::kF32) {
    std::memcpy(out.data(), q, cols * sizeof(float));
  } else if (f == ActFormat::kQ8_0) {
    DequantizeRow(GgmlType::kQ8_0, q, out.data(), cols);  // the same block layout
  } else if (f == ActFormat::kQ8_1) {
    for (int b = 0; b < cols / 32; ++b, q += 36) {
      const float d = kernels::HalfToFloat(static_cast<uint16_t>(q[0] | q[1] << 8));
      const float s = kernels::HalfToFloat(static_cast<uint16_t>(q[2] | q[3] << 8));
      const auto* v = reinterpret_cast<const int8_t*>(q + 4);
      int sum = 0;
      for (int j = 0; j < 32; ++j) sum += v[j];
      // s is d · Σq rounded to fp16 (d before its own rounding to fp16).
      EXPECT_NEAR(s, d * sum, std::fabs(d * sum) * 2e-3f + 1e-6f) << "Q8_1 block " << b;
      for (int j = 0; j < 32; ++j) out[32 * b + j] = d * v[j];
    }
  } else {
    for (int b = 0; b < cols / 256; ++b, q += 292) {
      float d;
      std::memcpy(&d, q, 4);
      const auto* v = reinterpret_cast<const int8_t*>(q + 4);
      int16_t sums[16];
      std::memcpy(sums, q + 260, sizeof(sums));
      for (int j = 0; j < 16; ++j) {
        int s = 0;
        for (int l = 0; l < 16; ++l) s += v[16 * j + l];
        EXPECT_EQ(s, sums[j]) << "Q8_K block " << b << " sum " << j;
      }
      for (int j = 0; j < 256; ++j) out[256 * b + j] = d * v[j];
    }
  }
  return out;
}

struct Case {
  std::string weights;             // rows × RowBytes
  std::vector<float> w_values;     // dequantized
  std::vector<uint8_t> acts;       // M × ActRowBytes
  std::vector<float> a_values;     // dequantized activations
  size_t row_bytes = 0, act_bytes = 0;
};

Case Make(GgmlType t, int rows, int M, int cols, std::mt19937* rng) {
  Case c;
  const std::vector<float> w = Normal(static_cast<size_t>(rows) * cols, rng, 0.05f);
  for (int r = 0; r < rows; ++r) QuantizeRow(t, w.data() + static_cast<size_t>(r) * cols, cols, &c.weights);
  c.row_bytes = RowBytes(t, cols);
  c.w_values.resize(w.size());
  DequantizeRow(t, reinterpret_cast<const uint8_t*>(c.weights.data()), c.w_values.data(), w.size());
  const ActFormat f = ActivationFormat(t);
  c.act_bytes = ActRowBytes(f, cols);
  c.acts.resize(static_cast<size_t>(M) * c.act_bytes);
  const std::vector<float> a = Normal(static_cast<size_t>(M) * cols, rng, 2.f);
  for (int m = 0; m < M; ++m) {
    QuantizeActivations(f, a.data() + static_cast<size_t>(m) * cols, cols, c.acts.data() + m * c.act_bytes);
    const std::vector<float> v = DequantizedActivations(f, c.acts.data() + m * c.act_bytes, cols);
    c.a_values.insert(c.a_values.end(), v.begin(), v.end());
  }
  return c;
}

// Q4_1 · Q8_1 multiplies each block's minimum by the activations' sum as
// Q8_1 stores it (s, fp16 of d · Σq: ggml's format), not by the sum of the
// dequantized activations; the difference, Σ over blocks of m · (s − Σa),
// is part of the format's value. 0 for other types.
double MinTermCorrection(GgmlType t, const Case& c, int r, int m, int cols) {
  if (t != GgmlType::kQ4_1) return 0;
  const auto* w = reinterpret_cast<const uint8_t*>(c.weights.data()) + size_t(r) * c.row_bytes;
  const uint8_t* a = c.acts.data() + size_t(m) * c.act_bytes;
  double corr = 0;
  for (int b = 0; b < cols / 32; ++b, w += 20, a += 36) {
    const float mw = kernels::HalfToFloat(static_cast<uint16_t>(w[2] | w[3] << 8));
    const float s = kernels::HalfToFloat(static_cast<uint16_t>(a[2] | a[3] << 8));
    double sum = 0;
    for (int j = 0; j < 32; ++j) sum += c.a_values[size_t(m) * cols + 32 * b + j];
    corr += double(mw) * (double(s) - sum);
  }
  return corr;
}

TEST(QuantDotTest, ProductsEqualTheDequantizedValuesProducts) {
  std::mt19937 rng(3);
  const int rows = 37, M = 5, cols = 1024;
  for (GgmlType t : kTypes) {
    const std::string name(TypeInfo(static_cast<uint32_t>(t))->name);
    const Case c = Make(t, rows, M, cols, &rng);
    for (bool portable : {true, false}) {
      std::vector<float> C(static_cast<size_t>(M) * rows, 1.f);
      const auto* w = reinterpret_cast<const uint8_t*>(c.weights.data());
      for (float beta : {0.f, 1.f}) {
        std::vector<float> out = C;
        if (portable) {
          DotRowsPortable(t, cols, w, c.row_bytes, rows, c.acts.data(), c.act_bytes, M, beta, out.data(), rows);
        } else {
          DotRows(t, cols, w, c.row_bytes, rows, c.acts.data(), c.act_bytes, M, beta, out.data(), rows);
        }
        double worst = 0;
        for (int m = 0; m < M; ++m) {
          for (int r = 0; r < rows; ++r) {
            double want = beta + MinTermCorrection(t, c, r, m, cols);
            for (int k = 0; k < cols; ++k) {
              want += double(c.w_values[size_t(r) * cols + k]) * c.a_values[size_t(m) * cols + k];
            }
            worst = std::max(worst, std::fabs(out[size_t(m) * rows + r] - want));
          }
        }
        // |products| ~ 0.1, 1024 of them: fp32 rounding of the partial sums only.
        EXPECT_LT(worst, 2e-4) << name << (portable ? " portable" : " dispatched") << " beta " << beta;
      }
    }
  }
}

// Both AVX2 one-row kernels of type t (the 256-bit one and, for Q4_K and
// Q5_K, the one in 128-bit registers that DotRows takes on Zen 1), whatever
// this CPU would pick, against the portable sums `want` of activation rows
// `stride` bytes apart.
void ExpectOneRowKernelsAgree(GgmlType t, int cols, const uint8_t* w, const uint8_t* act, size_t stride,
                              const std::vector<float>& want, const std::string& name) {
  for (const bool halves : {false, true}) {
    for (size_t m = 0; m < want.size(); ++m) {
      float got = 0;
      DotAvx2(t, halves)->one(w, act + m * stride, stride, cols, &got);
      EXPECT_NEAR(got, want[m], 1e-6 * cols * (1 + std::fabs(want[m])))
          << name << (halves ? " in 128-bit halves" : "") << ", activation row " << m;
    }
  }
}

TEST(QuantDotTest, VectorKernelsAgreeWithThePortableOnesOnArbitraryBytes) {
  if (!HasAvx2()) GTEST_SKIP() << "no AVX2 on this CPU: DotRows runs the portable loops only";
  std::mt19937 rng(7);
  // 512 columns, and for the 32-element types 1-5, 7 and 16 blocks: their
  // kernels take four blocks a step and the last 1-3 one at a time.
  for (const int cols : {512, 32, 64, 96, 128, 160, 224})
  for (GgmlType t : kTypes) {
    const GgmlTypeInfo info = *TypeInfo(static_cast<uint32_t>(t));
    if (cols % info.block_elems != 0) continue;
    const std::string name = std::string(info.name) + " cols " + std::to_string(cols);
    ASSERT_NE(DotAvx2(t, false), nullptr) << name;
    std::string w(RowBytes(t, cols), 0);
    for (char& ch : w) ch = static_cast<char>(rng());
    // fp16 scales (and F16/BF16 values) kept finite and small: high exponent bits cleared.
    if (t == GgmlType::kF16 || t == GgmlType::kBF16) {
      for (size_t i = 1; i < w.size(); i += 2) w[i] = static_cast<char>(w[i] & (t == GgmlType::kF16 ? 0xBB : 0xBF));
    } else {
      for (size_t b = 0; b < w.size(); b += info.block_bytes) {
        const size_t at = t == GgmlType::kQ6_K ? b + 208 : b;
        // fp16 scales below 1, normal or not: sign and top exponent bit cleared.
        w[at + 1] = static_cast<char>(w[at + 1] & 0x3B);
        if (t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ4_1) {
          w[at + 3] = static_cast<char>(w[at + 3] & 0x3B);
        }
      }
    }
    // 7 activation rows: the kernels' 4-, 2- and 1-row forms all run; rows
    // 8 bytes apart past their end, so a kernel that ignored the stride fails.
    const ActFormat f = ActivationFormat(t);
    const size_t stride = ActRowBytes(f, cols) + 8;
    const int M = 7;
    std::vector<uint8_t> act(M * stride);
    for (int m = 0; m < M; ++m) {
      const std::vector<float> a = Normal(cols, &rng, 3.f);
      QuantizeActivations(f, a.data(), cols, act.data() + m * stride);
    }
    const auto* wp = reinterpret_cast<const uint8_t*>(w.data());
    std::vector<float> fast(M), slow(M);
    DotRows(t, cols, wp, w.size(), 1, act.data(), stride, M, 0.f, fast.data(), 1);
    DotRowsPortable(t, cols, wp, w.size(), 1, act.data(), stride, M, 0.f, slow.data(), 1);
    for (int m = 0; m < M; ++m) {
      ASSERT_TRUE(std::isfinite(slow[m])) << name;
      // Equal integer sums: only the fp32 order of the per-block terms differs.
      EXPECT_NEAR(fast[m], slow[m], 1e-6 * cols * (1 + std::fabs(slow[m]))) << name << " activation row " << m;
    }
    ExpectOneRowKernelsAgree(t, cols, wp, act.data(), stride, slow, name);
  }
}

// Weights and activations near their largest magnitudes, all products of
// one sign: the int16 sums the kernels fold must not wrap or saturate, or
// the AVX2 products part from the portable ones by thousands. The tightest
// is the 128-bit one-row Q5_K kernel's (each lane 8 products of one
// sub-block, 8 x 31 x 127 = 31,496 here); the 256-bit folds hold 4 (Q5_K
// 15,748, Q6_K 16,256 at |v| = 32). Q6_K's values here are +31 and Q8_0's
// -127 (a file may hold -32 and -128: also within the bounds).
TEST(QuantDotTest, LargestValuesOfOneSignDoNotOverflowTheIntegerSums) {
  if (!HasAvx2()) GTEST_SKIP() << "no AVX2 on this CPU: DotRows runs the portable loops only";
  const int cols = 512, M = 7;
  for (GgmlType t : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K,
                     GgmlType::kQ6_K}) {
    const GgmlTypeInfo info = *TypeInfo(static_cast<uint32_t>(t));
    // Every value byte at the type's extreme: 0x00 for Q4_0 (nibbles 0, values
    // -8), -127 for Q8_0, 0xFF for the k-quants (nibbles 15, fifth and sixth
    // bits set: 15, 31, 63 - 32; 6-bit scales and mins 63; Q6_K's int8
    // scales -1); every fp16 scale 1.0.
    const char fill = t == GgmlType::kQ4_0 ? 0x00 : t == GgmlType::kQ8_0 ? static_cast<char>(0x81) : static_cast<char>(0xFF);
    std::string w(RowBytes(t, cols), fill);
    for (size_t b = 0; b < w.size(); b += info.block_bytes) {
      const size_t at = t == GgmlType::kQ6_K ? b + 208 : b;
      w[at] = 0x00;
      w[at + 1] = 0x3C;
      if (t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ4_1) {  // dmin, or Q4_1's minimum
        w[at + 2] = 0x00;
        w[at + 3] = 0x3C;
      }
    }
    for (const float sign : {1.f, -1.f}) {
      const ActFormat f = ActivationFormat(t);
      const size_t stride = ActRowBytes(f, cols);
      std::vector<uint8_t> act(M * stride);
      const std::vector<float> a(cols, sign);  // each quantized to +-127
      for (int m = 0; m < M; ++m) QuantizeActivations(f, a.data(), cols, act.data() + m * stride);
      const auto* wp = reinterpret_cast<const uint8_t*>(w.data());
      std::vector<float> fast(M), slow(M);
      DotRows(t, cols, wp, w.size(), 1, act.data(), stride, M, 0.f, fast.data(), 1);
      DotRowsPortable(t, cols, wp, w.size(), 1, act.data(), stride, M, 0.f, slow.data(), 1);
      for (int m = 0; m < M; ++m) {
        ASSERT_GT(std::fabs(slow[m]), 100.f) << info.name;
        EXPECT_NEAR(fast[m], slow[m], 1e-5f * std::fabs(slow[m])) << info.name << " sign " << sign << " row " << m;
      }
      ExpectOneRowKernelsAgree(t, cols, wp, act.data(), stride, slow, std::string(info.name) + " extreme");
    }
  }
}

// A NaN or an infinity among the activations makes the products NaN, as
// fp32 activations would, instead of rounding to a finite value.
TEST(QuantDotTest, NonFiniteActivationsStayNonFinite) {
  std::mt19937 rng(17);
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ4_K}) {
    // 7 blocks of 32 (four a step, then three one at a time) or 2 of 256.
    const int cols = t == GgmlType::kQ4_K ? 512 : 224;
    for (const int at : {cols / 3, cols - 10}) {
      for (float bad : {std::nanf(""), INFINITY}) {
        // Three activation rows, the bad value in the middle one: the
        // two-row kernel takes rows 0 and 1, the one-row kernel row 2.
        const int M = 3;
        Case c = Make(t, 1, M, cols, &rng);
        std::vector<float> a = Normal(cols, &rng);
        a[at] = bad;
        QuantizeActivations(ActivationFormat(t), a.data(), cols, c.acts.data() + c.act_bytes);
        const auto* w = reinterpret_cast<const uint8_t*>(c.weights.data());
        float fast[M], slow[M];
        DotRows(t, cols, w, c.row_bytes, 1, c.acts.data(), c.act_bytes, M, 0.f, fast, 1);
        DotRowsPortable(t, cols, w, c.row_bytes, 1, c.acts.data(), c.act_bytes, M, 0.f, slow, 1);
        const std::string name = std::string(TypeInfo(static_cast<uint32_t>(t))->name) + " at " +
                                 std::to_string(at) + " " + std::to_string(bad);
        EXPECT_TRUE(std::isnan(fast[1])) << name;
        EXPECT_TRUE(std::isnan(slow[1])) << name;
        EXPECT_TRUE(std::isfinite(fast[0]) && std::isfinite(fast[2])) << name;
      }
      // The same value in a one-row product (the one-row kernel).
      Case c = Make(t, 1, 1, cols, &rng);
      std::vector<float> a = Normal(cols, &rng);
      a[at] = std::nanf("");
      QuantizeActivations(ActivationFormat(t), a.data(), cols, c.acts.data());
      float fast = 0;
      DotRows(t, cols, reinterpret_cast<const uint8_t*>(c.weights.data()), c.row_bytes, 1, c.acts.data(),
              c.act_bytes, 1, 0.f, &fast, 1);
      EXPECT_TRUE(std::isnan(fast)) << TypeInfo(static_cast<uint32_t>(t))->name << " one row, at " << at;
    }
  }
}

// Rows packed 8 at a time give the products of the rows as the file holds
// them (the same integer sums; fp32 order differs), for activation rows
// that take every kernel width (4, 2, 1 rows at a time), accumulating or
// not, per packed type.
TEST(QuantDotTest, PackedRowsGiveTheFileRowsProducts) {
  if (!HasPackedKernels()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU: no rows are packed";
  std::mt19937 rng(13);
  const int rows = 24, cols = 768;
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ8_0}) {
    const std::string_view name = TypeInfo(static_cast<uint32_t>(t))->name;
    ASSERT_TRUE(HasPacked(t)) << name;
    for (int M : {1, 2, 3, 4, 7, 8, 15}) {
      Case c = Make(t, rows, M, cols, &rng);
      // -128, which a symmetric quantizer never writes but a file may hold.
      if (t == GgmlType::kQ8_0) {
        for (size_t b = 0; b < c.weights.size(); b += 34 * 7) c.weights[b + 2 + b % 32] = static_cast<char>(0x80);
      }
      std::vector<uint8_t> packed(PackedBytes(t, rows, cols));
      ASSERT_EQ(packed.size(), t == GgmlType::kQ4_K ? size_t{3} * 3 * kPackedQ4KBlockBytes
                                                     : size_t{3} * 24 * kPackedQ8_0BlockBytes);
      const auto* w = reinterpret_cast<const uint8_t*>(c.weights.data());
      Pack(t, w, c.row_bytes, rows, cols, packed.data());
      std::vector<uint32_t> side(static_cast<size_t>(M) * PackedSideWords(t, cols));
      PackedSide(t, c.acts.data(), c.act_bytes, M, cols, side.data());
      for (float beta : {0.f, 1.f}) {
        std::vector<float> want(static_cast<size_t>(M) * rows, 0.5f), got = want;
        DotRowsPortable(t, cols, w, c.row_bytes, rows, c.acts.data(), c.act_bytes, M, beta, want.data(), rows);
        // The last two groups only, as a thread's share of rows would be.
        DotRowsPacked(t, cols, packed.data(), 8, c.acts.data(), c.act_bytes, side.data(), M, beta, got.data(), rows);
        DotRowsPacked(t, cols, packed.data() + PackedBytes(t, 8, cols), 16, c.acts.data(), c.act_bytes, side.data(),
                      M, beta, got.data() + 8, rows);
        for (size_t i = 0; i < want.size(); ++i) {
          EXPECT_NEAR(got[i], want[i], 1e-4 * std::max(1.0f, std::fabs(want[i])))
              << name << " M " << M << " beta " << beta << " row " << i % rows << " act " << i / rows;
        }
      }
    }
  }
}

// Packed rows turn an infinite activation into NaN products too (its
// block's scale is NaN), as the file's layout does.
TEST(QuantDotTest, PackedRowsKeepNonFiniteActivationsNonFinite) {
  if (!HasPackedKernels()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU: no rows are packed";
  std::mt19937 rng(19);
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ8_0}) {
    const int cols = 512;
    Case c = Make(t, 8, 1, cols, &rng);
    std::vector<float> a = Normal(cols, &rng);
    a[300] = INFINITY;
    QuantizeActivations(ActivationFormat(t), a.data(), cols, c.acts.data());
    std::vector<uint8_t> packed(PackedBytes(t, 8, cols));
    Pack(t, reinterpret_cast<const uint8_t*>(c.weights.data()), c.row_bytes, 8, cols, packed.data());
    std::vector<uint32_t> side(PackedSideWords(t, cols));
    PackedSide(t, c.acts.data(), c.act_bytes, 1, cols, side.data());
    float out[8];
    DotRowsPacked(t, cols, packed.data(), 8, c.acts.data(), c.act_bytes, side.data(), 1, 0.f, out, 8);
    for (float v : out) EXPECT_TRUE(std::isnan(v)) << TypeInfo(static_cast<uint32_t>(t))->name;
  }
}

// The AVX2 quantizers write the portable loops' bytes: scales, values
// (ties to even), Q8_K's sums, on rows with exact ties, zero blocks, a
// largest magnitude held by both signs, denormals, huge values, and a NaN
// or an infinity in one block.
TEST(QuantDotTest, VectorQuantizersWriteThePortableBytes) {
  if (!HasAvx2()) GTEST_SKIP() << "no AVX2 on this CPU: only the portable quantizers run";
  std::mt19937 rng(21);
  const int cols = 1024;
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<float> x = Normal(cols, &rng, trial % 7 == 0 ? 1e30f : trial % 5 == 0 ? 1e-40f : 3.f);
    const int kind = trial % 8;
    if (kind == 1) std::fill(x.begin() + 256, x.begin() + 512, 0.f);
    if (kind == 2) {  // exact half steps: 127 at the top, k + 0.5 below
      for (int j = 0; j < cols; ++j) x[j] = j % 32 == 0 ? 127.f : static_cast<float>(j % 100 - 50) + 0.5f;
    }
    if (kind == 3) {
      x[300] = -50.f;
      x[301] = 50.f;
      x[40] = 60.f;
      x[41] = -60.f;
    }
    if (kind == 4) x[rng() % cols] = std::numeric_limits<float>::quiet_NaN();
    if (kind == 5) x[rng() % cols] = (rng() & 1) ? INFINITY : -INFINITY;
    for (ActFormat f : {ActFormat::kQ8_0, ActFormat::kQ8_1, ActFormat::kQ8_K}) {
      std::vector<uint8_t> want(ActRowBytes(f, cols)), got(want.size());
      QuantizeActivationsPortable(f, x.data(), cols, want.data());
      if (f == ActFormat::kQ8_0) QuantizeQ8_0Avx2(x.data(), cols, got.data());
      else if (f == ActFormat::kQ8_1) QuantizeQ8_1Avx2(x.data(), cols, got.data());
      else QuantizeQ8_KAvx2(x.data(), cols, got.data());
      const size_t at = std::mismatch(want.begin(), want.end(), got.begin()).first - want.begin();
      ASSERT_EQ(at, want.size()) << (f == ActFormat::kQ8_0 ? "Q8_0" : f == ActFormat::kQ8_1 ? "Q8_1" : "Q8_K") << " trial " << trial
                                 << ": first different byte " << at;
      // What MatMul calls dispatches to them.
      QuantizeActivations(f, x.data(), cols, got.data());
      ASSERT_EQ(want, got);
    }
  }
}

// The sign-taking kernels (Q8_0, Q4_0, Q6_K: |w| against y with w's sign)
// need no activation to be -128. The extremes that could round there: a
// block's value of largest magnitude, positive or negative, beside values
// one float below it and its opposite, at scales from denormal to huge,
// through both quantizers of both formats.
TEST(QuantDotTest, ActivationsNeverTakeMinus128) {
  std::mt19937 rng(23);
  const int cols = 256;
  for (int e = -149; e <= 120; e += 3) {
    for (int trial = 0; trial < 8; ++trial) {
      const float max = std::ldexp(1.f + static_cast<float>(rng() % 1000) / 1000.f, e) * ((trial & 1) ? -1.f : 1.f);
      std::vector<float> x(cols);
      for (int j = 0; j < cols; ++j) {
        const int k = static_cast<int>(rng() % 4);
        x[j] = k == 0 ? max : k == 1 ? -max : k == 2 ? std::nextafter(max, 0.f) : -std::nextafter(max, 0.f);
      }
      for (ActFormat f : {ActFormat::kQ8_0, ActFormat::kQ8_1, ActFormat::kQ8_K}) {
        // Each block: its scale (fp16 or fp32; Q8_1's sum after it), then the n int8 values.
        const size_t n = f == ActFormat::kQ8_K ? 256 : 32, head = f == ActFormat::kQ8_0 ? 2 : 4;
        const size_t block = ActRowBytes(f, static_cast<int>(n));
        std::vector<uint8_t> q(ActRowBytes(f, cols));
        for (int pass = 0; pass < 2; ++pass) {
          if (pass == 0) QuantizeActivationsPortable(f, x.data(), cols, q.data());
          else QuantizeActivations(f, x.data(), cols, q.data());
          for (size_t b = 0; b < q.size() / block; ++b) {
            for (size_t j = 0; j < n; ++j) {
              ASSERT_NE(static_cast<int8_t>(q[b * block + head + j]), -128)
                  << (f == ActFormat::kQ8_0 ? "Q8_0" : f == ActFormat::kQ8_1 ? "Q8_1" : "Q8_K")
                  << (pass ? " dispatched" : " portable") << " max " << max;
            }
          }
        }
      }
    }
  }
}

// 8-bit activations: every value within half a step of its float, the
// Q8_K scale taken from the value of largest magnitude (its sign kept), and
// an all-zero block all zeros.
TEST(QuantDotTest, ActivationsRoundToTheNearestStep) {
  std::mt19937 rng(9);
  std::vector<float> x = Normal(512, &rng, 4.f);
  std::fill(x.begin() + 256, x.end(), 0.f);
  for (ActFormat f : {ActFormat::kQ8_0, ActFormat::kQ8_1, ActFormat::kQ8_K}) {
    std::vector<uint8_t> q(ActRowBytes(f, 512));
    QuantizeActivations(f, x.data(), 512, q.data());
    const std::vector<float> v = DequantizedActivations(f, q.data(), 512);
    const int block = f == ActFormat::kQ8_K ? 256 : 32;
    if (f == ActFormat::kQ8_K) {
      // ggml's convention: d = -max / 127 for the value of largest magnitude.
      float d;
      std::memcpy(&d, q.data(), 4);
      const float max = *std::max_element(x.begin(), x.begin() + 256, [](float a, float b) { return std::fabs(a) < std::fabs(b); });
      EXPECT_FLOAT_EQ(d, -max / 127.f);
    }
    for (int b = 0; b < 512 / block; ++b) {
      float amax = 0;
      for (int j = 0; j < block; ++j) amax = std::max(amax, std::fabs(x[b * block + j]));
      const float step = amax / 127.f;
      for (int j = 0; j < block; ++j) {
        // Q8_0's scale is stored as fp16: its rounding adds up to 2^-11 of a value.
        EXPECT_NEAR(v[b * block + j], x[b * block + j], 0.5f * step * 1.01f + amax * 1e-3f)
            << (f == ActFormat::kQ8_0 ? "Q8_0" : f == ActFormat::kQ8_1 ? "Q8_1" : "Q8_K") << " block " << b
            << " element " << j;
      }
    }
  }
  EXPECT_EQ(ActRowBytes(ActFormat::kQ8_K, 512), 2u * 292);
  EXPECT_EQ(ActRowBytes(ActFormat::kQ8_0, 512), 16u * 34);
  EXPECT_EQ(ActRowBytes(ActFormat::kQ8_1, 512), 16u * 36);
  EXPECT_EQ(ActivationFormat(GgmlType::kQ4_1), ActFormat::kQ8_1);
  EXPECT_EQ(ActivationFormat(GgmlType::kQ5_0), ActFormat::kNone);
  EXPECT_EQ(ActivationFormat(GgmlType::kF32), ActFormat::kNone);
}

}  // namespace
}  // namespace tierkv::model

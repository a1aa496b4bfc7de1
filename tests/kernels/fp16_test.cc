#include "kernels/fp16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>
#include <vector>

namespace tierkv::kernels {
namespace {

TEST(Fp16Test, ExactValuesRoundTrip) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.9604644775390625e-08f}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(f)), f) << f;
  }
  EXPECT_TRUE(std::isinf(HalfToFloat(FloatToHalf(1e6f))));
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(NAN))));
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
}

TEST(Fp16Test, AllHalvesRoundTripAndVectorPathAgrees) {
  std::vector<uint16_t> h(65536);
  for (int i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<float> f(h.size());
  HalfToFloatN(h.data(), f.data(), h.size());
  std::vector<uint16_t> back(h.size());
  FloatToHalfN(f.data(), back.data(), f.size());
  for (int i = 0; i < 65536; ++i) {
    const bool nan = ((i >> 10) & 0x1f) == 0x1f && (i & 0x3ff);
    if (nan) {
      EXPECT_TRUE(std::isnan(f[i]));
      continue;
    }
    ASSERT_EQ(back[i], h[i]) << i;
    ASSERT_EQ(HalfToFloat(h[i]), f[i]) << i;
    ASSERT_EQ(FloatToHalf(f[i]), h[i]) << i;
  }
}

TEST(Fp16Test, RoundsToNearestEvenLikeTheHardwarePath) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
  std::vector<float> f(100000);
  for (size_t i = 0; i < f.size(); ++i) f[i] = u(rng) * std::pow(10.0f, -static_cast<float>(i % 9));
  std::vector<uint16_t> vec(f.size());
  FloatToHalfN(f.data(), vec.data(), f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    ASSERT_EQ(FloatToHalf(f[i]), vec[i]) << f[i];
    const float back = HalfToFloat(vec[i]);
    if (std::fabs(f[i]) < 65504.0f && std::fabs(f[i]) > 6.2e-5f) {
      ASSERT_LE(std::fabs(back - f[i]), std::fabs(f[i]) * (1.0f / 2048.0f)) << f[i];
    }
  }
}

// Strided rows (one KV head of a wider record) and widths off the vector
// width convert as element by element, and dense rows as one run.
TEST(Fp16Test, StridedRowsConvertAsEachElement) {
  std::mt19937 rng(5);
  for (const auto& [width, stride] : {std::pair<size_t, size_t>{16, 48}, {13, 20}, {16, 16}, {3, 3}}) {
    const size_t rows = 7;
    std::vector<uint16_t> in(rows * stride);
    for (auto& h : in) h = static_cast<uint16_t>(rng() & 0x7bff);  // finite halves, both signs
    std::vector<float> out(rows * width, -1.0f);
    HalfToFloatRows(in.data(), stride, rows, width, out.data());
    for (size_t r = 0; r < rows; ++r) {
      for (size_t i = 0; i < width; ++i) {
        ASSERT_EQ(out[r * width + i], HalfToFloat(in[r * stride + i])) << width << " " << stride;
      }
    }
  }
}

}  // namespace
}  // namespace tierkv::kernels

// WeightMatrix: products with rows read in place in their GGUF types equal
// the products with their dequantized values; errors name what is wrong.
#include "model/weight_matrix.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "model/dequant_avx2.h"
#include "model/quant.h"
#include "model/crossover.h"
#include "model/quant_dot.h"
#include "model/quant_pack.h"
#include "testing/shared.h"
#include "testing/status_matchers.h"
#include "tierkv/filesystem.h"
#include "util/huge_pages.h"
#include "util/thread_pool.h"

namespace tierkv::model {
namespace {

using testing::IsOk;
using testing::StatusIs;

// `rows` rows of N(0, 1) values in type t.
std::string QuantizedRows(GgmlType t, int rows, int cols, std::mt19937* rng) {
  std::normal_distribution<float> d(0.f, 1.f);
  std::string out;
  std::vector<float> row(cols);
  for (int r = 0; r < rows; ++r) {
    for (float& x : row) x = d(*rng);
    QuantizeRow(t, row.data(), row.size(), &out);
  }
  return out;
}

// A matrix stacking tensors of several types (as the fused Q/K/V of a
// Q4_K_M file), and the byte buffers it reads in place.
struct Stacked {
  std::vector<std::string> buffers;
  WeightMatrix w;
};

void Stack(const std::vector<std::pair<GgmlType, int>>& parts, int cols, Stacked* s) {
  std::mt19937 rng(5);
  s->buffers.reserve(parts.size());
  for (const auto& [t, rows] : parts) {
    s->buffers.push_back(QuantizedRows(t, rows, cols, &rng));
    ASSERT_THAT(s->w.AppendInPlace(t, reinterpret_cast<const uint8_t*>(s->buffers.back().data()), rows, cols),
                IsOk());
  }
}

// C = A · W[r0, r0+n)^T + beta · C in double from the dequantized values.
std::vector<double> Reference(const std::vector<float>& A, int M, const std::vector<float>& W, int cols, int r0,
                              int n, float beta, const std::vector<float>& C0) {
  std::vector<double> C(static_cast<size_t>(M) * n);
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int k = 0; k < cols; ++k) s += double(A[size_t(i) * cols + k]) * W[size_t(r0 + j) * cols + k];
      C[size_t(i) * n + j] = s + beta * C0[size_t(i) * n + j];
    }
  }
  return C;
}

// Both paths against the product of the dequantized weights with the fp32
// activations: sgemm's within fp32 rounding; the in-type one within its
// 8-bit activations' rounding, bounded per output by Σ_k |w_k| · step_k / 2
// (step: the block's max |a| / 127; 32-element blocks bound Q8_K's 256 too
// loosely, so the bound takes the 256-element block's step). MatMul takes
// the in-type path, bit for bit, where every part's type has M within its
// InTypeMaxRows, and the dequantizing one where none has.
void ExpectProduct(const WeightMatrix& w, ThreadPool* pool, int M, int r0, int n, float beta) {
  const int cols = w.cols();
  std::mt19937 rng(M * 31 + r0);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> A(static_cast<size_t>(M) * cols), C0(static_cast<size_t>(M) * n);
  for (float& x : A) x = d(rng);
  for (float& x : C0) x = d(rng);
  const std::vector<float> W = w.FloatValues();
  const std::vector<double> want = Reference(A, M, W, cols, r0, n, beta, C0);
  std::vector<float> step(A.size());
  for (size_t b = 0; b < A.size(); b += 256) {
    float amax = 0;
    for (size_t k = b; k < std::min(A.size(), b + 256); ++k) amax = std::max(amax, std::fabs(A[k]));
    for (size_t k = b; k < std::min(A.size(), b + 256); ++k) step[k] = amax / 127.f;
  }
  using Path = WeightMatrix::Path;
  for (Path path : {Path::kDequantize, Path::kInType}) {
    std::vector<float> C = C0;
    w.MatMulBy(path, pool, M, A.data(), cols, r0, n, beta, C.data(), n);
    int over = 0;
    for (int i = 0; i < M; ++i) {
      for (int j = 0; j < n; ++j) {
        double bound = 2e-3;  // sums of `cols` products of N(0, 1) values, in fp32
        if (path == Path::kInType) {
          for (int k = 0; k < cols; ++k) {
            bound += std::fabs(W[size_t(r0 + j) * cols + k]) * step[size_t(i) * cols + k] * 0.5 * 1.002;
          }
        }
        if (std::fabs(C[size_t(i) * n + j] - want[size_t(i) * n + j]) > bound) ++over;
      }
    }
    EXPECT_EQ(over, 0) << (path == Path::kInType ? "in type" : "dequantized") << ": M " << M << " rows [" << r0
                       << ", " << r0 + n << ") pool " << (pool != nullptr);
    int lo = 1 << 30, hi = 0;
    for (const WeightMatrix::PartInfo& p : w.parts()) {
      if (p.type == GgmlType::kF32) continue;
      lo = std::min(lo, p.max_rows_in_type);
      hi = std::max(hi, p.max_rows_in_type);
    }
    if ((path == Path::kInType && M <= lo) || (path == Path::kDequantize && M > hi)) {
      std::vector<float> auto_c = C0;
      w.MatMul(pool, M, A.data(), cols, r0, n, beta, auto_c.data(), n);
      EXPECT_EQ(0, std::memcmp(auto_c.data(), C.data(), C.size() * sizeof(float))) << "MatMul's path for M " << M;
    }
  }
}

TEST(WeightMatrixTest, RowsOfSeveralTypesInPlaceGiveTheProductOfTheirValues) {
  Stacked s;
  ASSERT_NO_FATAL_FAILURE(Stack({{GgmlType::kF32, 40}, {GgmlType::kQ8_0, 70}, {GgmlType::kQ4_K, 50},
                                 {GgmlType::kF16, 30}, {GgmlType::kQ6_K, 20}, {GgmlType::kBF16, 9}},
                                256, &s));
  ASSERT_EQ(s.w.rows(), 219);
  EXPECT_FALSE(s.w.all_f32());
  size_t bytes = 0;
  for (const std::string& b : s.buffers) bytes += b.size();
  EXPECT_EQ(s.w.bytes(), bytes);
  // One row count above every part's threshold, so that MatMul's own choice
  // of the dequantizing path is checked on every kind of CPU (the
  // thresholds reach 128 with AVX2 only).
  int above = 0;
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kF16, GgmlType::kQ6_K, GgmlType::kBF16}) {
    above = std::max(above, InTypeMaxRows(t) + 1);
  }
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), ThreadPool::Compute()}) {
    for (int M : {1, 5, 37, above}) {
      ExpectProduct(s.w, pool, M, 0, s.w.rows(), 0.0f);
      ExpectProduct(s.w, pool, M, 35, 120, 1.0f);  // from the F32 rows into the Q4_K ones, accumulating
      ExpectProduct(s.w, pool, M, 200, 19, 0.0f);
    }
  }
  // Rows across parts are each part's own dequantization.
  const std::vector<float> all = s.w.FloatValues();
  std::vector<float> some(120 * 256);
  s.w.DequantizeRows(35, 120, some.data());
  EXPECT_EQ(0, std::memcmp(some.data(), all.data() + 35 * 256, some.size() * sizeof(float)));
  std::vector<float> q8(256);
  DequantizeRow(GgmlType::kQ8_0, reinterpret_cast<const uint8_t*>(s.buffers[1].data()) + 3 * RowBytes(GgmlType::kQ8_0, 256),
                q8.data(), 256);
  EXPECT_EQ(0, std::memcmp(q8.data(), all.data() + (40 + 3) * 256, q8.size() * sizeof(float)));
  // Owned fp32 holds the same values.
  const WeightMatrix f = s.w.ToFloats();
  EXPECT_TRUE(f.all_f32());
  EXPECT_EQ(f.bytes(), size_t{219} * 256 * 4);
  EXPECT_EQ(f.FloatValues(), all);
  ExpectProduct(f, ThreadPool::Compute(), 5, 35, 120, 1.0f);
}

// Packed parts (Q8_0 and Q4_K on CPUs with AVX-512 VNNI) multiply in type
// at every number of activation rows, within the 8-bit activations' bound
// of the exact product: 40 rows (above the unpacked types' 16 on those
// CPUs) and 300
// (more than one of the 256-row chunks a packed product walks), through
// MatMul's own choice, each part with tail rows left in the file's layout.
TEST(WeightMatrixTest, PackedPartsMultiplyInTypeAtEveryLength) {
  Stacked s;
  ASSERT_NO_FATAL_FAILURE(Stack({{GgmlType::kQ8_0, 21}, {GgmlType::kQ4_K, 19}}, 512, &s));
  s.w.PackForProducts();
  const std::vector<WeightMatrix::PartInfo> parts = s.w.parts();
  ASSERT_EQ(parts.size(), 2u);
  for (const WeightMatrix::PartInfo& p : parts) {
    EXPECT_EQ(p.packed_rows, HasPackedKernels() ? 16 : 0);
    EXPECT_EQ(p.max_rows_in_type, HasPackedKernels() ? std::numeric_limits<int>::max() : InTypeMaxRows(p.type));
  }
  for (int M : {1, 40, 300}) {
    ExpectProduct(s.w, ThreadPool::Compute(), M, 0, s.w.rows(), 0.0f);
    ExpectProduct(s.w, ThreadPool::Compute(), M, 3, 30, 1.0f);  // from inside a Q8_0 group into the Q4_K tail
  }
}

// Q4_K parts are packed in whole groups of 8 rows for the in-type kernels
// (on CPUs with AVX-512 VNNI; else the test runs the file's layout): the
// Q4_K part below is rows 5-65 of the matrix, 7 packed groups (5-60) and 5
// rows left in the file's layout (61-65). Products starting or ending
// inside a group take the rows around the groups from the file's layout.
TEST(WeightMatrixTest, PackedQ4KRowsAndTheRowsAroundThemGiveTheProduct) {
  Stacked s;
  ASSERT_NO_FATAL_FAILURE(Stack({{GgmlType::kQ8_0, 5}, {GgmlType::kQ4_K, 61}, {GgmlType::kQ6_K, 16}}, 512, &s));
  s.w.PackForProducts();
  const std::vector<WeightMatrix::PartInfo> parts = s.w.parts();
  ASSERT_EQ(parts.size(), 3u);
  // The 5 Q8_0 rows are less than a group; the Q6_K rows have no packing.
  EXPECT_EQ(parts[0].packed_rows, 0);
  EXPECT_EQ(parts[1].packed_rows, HasPackedKernels() ? 56 : 0);
  EXPECT_EQ(parts[2].packed_rows, 0);
  EXPECT_EQ(s.w.packed_bytes(), HasPackedKernels() ? PackedBytes(GgmlType::kQ4_K, 56, 512) : 0u);
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), ThreadPool::Compute()}) {
    for (int M : {1, 3, 6}) {
      ExpectProduct(s.w, pool, M, 0, s.w.rows(), 0.0f);
      ExpectProduct(s.w, pool, M, 8, 70, 1.0f);   // from the part's 4th row (inside group 0) into the Q6_K rows
      ExpectProduct(s.w, pool, M, 6, 5, 0.0f);    // the part's rows 1-5: inside group 0
      ExpectProduct(s.w, pool, M, 26, 40, 0.0f);  // rows 21-60 of the part: half of group 2, groups 3-6, the 5 unpacked rows
    }
  }
}

// The loader copies the rows products read out of the file's mapping into
// a huge-page buffer (CopyRowsTo): afterwards the products and the
// dequantized values are the same, bit for bit, and come from the copy:
// the original bytes overwritten change nothing. Packed parts stay in place.
TEST(WeightMatrixTest, CopiedRowsAreTheOnesMultiplied) {
  Stacked s;
  ASSERT_NO_FATAL_FAILURE(
      Stack({{GgmlType::kF32, 40}, {GgmlType::kQ8_0, 70}, {GgmlType::kQ4_K, 50}, {GgmlType::kQ6_K, 20}}, 256, &s));
  s.w.PackForProducts();
  const int above = InTypeMaxRows(GgmlType::kQ4_K) + 1;
  const std::vector<float> values = s.w.FloatValues();
  std::vector<std::vector<float>> before;
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> A(static_cast<size_t>(above) * 256);
  for (float& x : A) x = d(rng);
  for (int M : {1, 5, above}) {
    before.emplace_back(static_cast<size_t>(M) * s.w.rows());
    s.w.MatMul(ThreadPool::Compute(), M, A.data(), 256, 0.0f, before.back().data(), s.w.rows());
  }
  const std::vector<WeightMatrix::PartInfo> parts = s.w.parts();
  size_t want = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].packed_rows == 0) want += (s.buffers[i].size() + 63) / 64 * 64;
  }
  ASSERT_EQ(s.w.CopiedBytes(), want);
  auto buffer = HugePageBuffer::Allocate(want);
  ASSERT_THAT(buffer.status(), IsOk());
  ASSERT_EQ(reinterpret_cast<uintptr_t>((*buffer)->data()) % HugePageBuffer::kPageBytes, 0u);
  EXPECT_EQ(s.w.CopyRowsTo((*buffer)->data(), /*release_rows=*/false), want);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].packed_rows == 0) std::memset(s.buffers[i].data(), 0x7f, s.buffers[i].size());
  }
  EXPECT_EQ(s.w.FloatValues(), values);
  int k = 0;
  for (int M : {1, 5, above}) {
    std::vector<float> after(static_cast<size_t>(M) * s.w.rows());
    s.w.MatMul(ThreadPool::Compute(), M, A.data(), 256, 0.0f, after.data(), s.w.rows());
    EXPECT_EQ(0, std::memcmp(after.data(), before[k++].data(), after.size() * sizeof(float))) << "M " << M;
  }
  ExpectProduct(s.w, ThreadPool::Compute(), 5, 35, 120, 1.0f);
}

// The loader's case: rows in a file's mapping, more than one 16 MiB slice
// of them, copied with the file's pages released behind each slice: the
// copy holds every byte (the values and a product are unchanged, bit for
// bit), and the mapping, read again, still holds the file's bytes.
TEST(WeightMatrixTest, RowsCopiedFromAFileMappingSliceBySlice) {
  const int cols = 1024, f32_rows = 4500;  // 18.4 MB of F32 rows
  std::mt19937 rng(7);
  std::string bytes = QuantizedRows(GgmlType::kF32, f32_rows, cols, &rng);
  bytes.insert(0, 100, 'x');  // the rows start off a page boundary, as a tensor in a file does
  const size_t q8_at = bytes.size();
  bytes += QuantizedRows(GgmlType::kQ8_0, 40, cols, &rng);
  const std::string dir = testing::MakeTempDir("wmcopy"), path = dir + "/rows.bin";
  {
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  auto file = MapOrReadFile(FileSystem::Default(), path);
  ASSERT_THAT(file.status(), IsOk());
  ASSERT_TRUE((*file)->mapped());
  const auto* base = reinterpret_cast<const uint8_t*>((*file)->data().data());
  WeightMatrix w;
  ASSERT_THAT(w.AppendInPlace(GgmlType::kF32, base + 100, f32_rows, cols), IsOk());
  ASSERT_THAT(w.AppendInPlace(GgmlType::kQ8_0, base + q8_at, 40, cols), IsOk());
  const std::vector<float> values = w.FloatValues();
  std::vector<float> A(3 * cols), before(3 * size_t{4540}), after(before.size());
  for (float& x : A) x = std::normal_distribution<float>(0.f, 1.f)(rng);
  w.MatMul(ThreadPool::Compute(), 3, A.data(), cols, 0.0f, before.data(), 4540);
  auto buffer = HugePageBuffer::Allocate(w.CopiedBytes());
  ASSERT_THAT(buffer.status(), IsOk());
  w.CopyRowsTo((*buffer)->data(), /*release_rows=*/true);
  EXPECT_EQ(w.FloatValues(), values);
  w.MatMul(ThreadPool::Compute(), 3, A.data(), cols, 0.0f, after.data(), 4540);
  EXPECT_EQ(0, std::memcmp(after.data(), before.data(), after.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(base, bytes.data(), bytes.size())) << "a released page read back differs";
  EXPECT_EQ(0, std::memcmp((*buffer)->data(), bytes.data() + 100, size_t{f32_rows} * cols * 4));
  // Copied once: nothing is copied again.
  EXPECT_EQ(w.CopiedBytes(), 0u);
  std::remove(path.c_str());
  std::remove(dir.c_str());
}

// Wide rows: a thread's columns are dequantized in several tiles.
TEST(WeightMatrixTest, WideRowsAreMultipliedTileByTile) {
  Stacked s;
  ASSERT_NO_FATAL_FAILURE(Stack({{GgmlType::kQ8_0, 100}, {GgmlType::kQ4_0, 77}}, 4096, &s));
  ExpectProduct(s.w, ThreadPool::Compute(), 3, 0, s.w.rows(), 0.0f);
  ExpectProduct(s.w, nullptr, 9, 13, 150, 1.0f);
}

TEST(WeightMatrixTest, AppendRefusesRowsThatDoNotFit) {
  Stacked s;
  ASSERT_NO_FATAL_FAILURE(Stack({{GgmlType::kQ8_0, 4}}, 64, &s));
  const uint8_t* p = reinterpret_cast<const uint8_t*>(s.buffers[0].data());
  EXPECT_THAT(s.w.AppendInPlace(GgmlType::kQ8_0, p, 2, 96), StatusIs(StatusCode::kInvalidArgument, "96 columns"));
  WeightMatrix k;
  EXPECT_THAT(k.AppendInPlace(GgmlType::kQ4_K, p, 2, 64),
              StatusIs(StatusCode::kInvalidArgument, "not whole Q4_K blocks of 256"));
  WeightMatrix owned = WeightMatrix::Floats(std::vector<float>(64 * 2), 2, 64);
  EXPECT_THAT(owned.AppendInPlace(GgmlType::kQ8_0, p, 2, 64), StatusIs(StatusCode::kInvalidArgument, "owned"));
  EXPECT_EQ(s.w.rows(), 4);
}

TEST(WeightMatrixTest, CheckFiniteNamesTheTensorAndTheIndex) {
  Stacked s;
  ASSERT_NO_FATAL_FAILURE(Stack({{GgmlType::kF16, 3}, {GgmlType::kQ8_0, 5}}, 128, &s));
  EXPECT_THAT(s.w.CheckFinite("m.gguf", "blk.0.attn_v.weight"), IsOk());
  // Row 2 of the Q8_0 rows, block 1: its fp16 scale made NaN.
  const size_t block = 2 * RowBytes(GgmlType::kQ8_0, 128) + 34;
  s.buffers[1][block] = 0x00;
  s.buffers[1][block + 1] = 0x7e;
  EXPECT_THAT(s.w.CheckFinite("m.gguf", "blk.0.attn_v.weight"),
              StatusIs(StatusCode::kCorruption,
                       "m.gguf: tensor blk.0.attn_v.weight holds a non-finite value at index " +
                           std::to_string((3 + 2) * 128 + 32)));
  EXPECT_THAT(WeightMatrix().CheckFinite("m.gguf", "output.weight"), IsOk());
}

// The AVX2 block loops give the portable loops' values bit for bit, on
// quantizer output and on arbitrary bytes (every scale and nibble pattern;
// fp16 scales kept finite).
TEST(DequantizeTest, VectorLoopsEqualThePortableOnesBitForBit) {
  if (!HasAvx2()) GTEST_SKIP() << "no AVX2 on this CPU: DequantizeRow runs the portable loops only";
  std::mt19937 rng(11);
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    const size_t n = 4096;
    std::string bytes = QuantizedRows(t, 1, n, &rng);
    std::string noise = bytes;
    const GgmlTypeInfo info = *TypeInfo(static_cast<uint32_t>(t));
    for (char& c : noise) c = static_cast<char>(rng());
    // Scales at their places, as small finite fp16 values (high exponent bits cleared).
    for (size_t b = 0; b < noise.size(); b += info.block_bytes) {
      const size_t at = t == GgmlType::kQ6_K ? b + 208 : b;
      noise[at + 1] = static_cast<char>(noise[at + 1] & 0x83);
      if (t == GgmlType::kQ4_K) noise[at + 3] = static_cast<char>(noise[at + 3] & 0x83);
    }
    for (const std::string* src : {&bytes, &noise}) {
      std::vector<float> fast(n), portable(n);
      DequantizeRow(t, reinterpret_cast<const uint8_t*>(src->data()), fast.data(), n);
      DequantizeRowPortable(t, reinterpret_cast<const uint8_t*>(src->data()), portable.data(), n);
      EXPECT_EQ(0, std::memcmp(fast.data(), portable.data(), n * sizeof(float))) << info.name;
    }
  }
}

}  // namespace
}  // namespace tierkv::model

#include "model/crossover.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <thread>
#include <limits>
#include <string>

#include "model/quant_dot.h"
#include "model/quant_pack.h"
#include "model/weight_matrix.h"
#include "testing/shared.h"
#include "testing/status_matchers.h"
#include "tierkv/model.h"
#include "util/thread_pool.h"

namespace tierkv::model {
namespace {

// Restores the built-in table when a test ends, whatever it set.
class CrossoverTest : public ::testing::Test {
 protected:
  void TearDown() override { UseCrossover(Crossover{}); }
};

Crossover Here(std::vector<std::pair<GgmlType, int>> rows) { return Crossover{CpuName(), DotKernelName(), rows}; }

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = testing::MakeTempDir("crossover") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// The error's message, or "" for Ok.
template <typename T>
std::string Message(const Result<T>& r) {
  return r.ok() ? std::string() : r.status().ToString();
}

TEST_F(CrossoverTest, FormatsAndParsesBack) {
  const Crossover c = Here({{GgmlType::kQ4_K, 64}, {GgmlType::kQ8_0, 0}, {GgmlType::kBF16, 4096}});
  const std::string text = FormatCrossover(c);
  EXPECT_EQ(text.substr(0, text.find('\n')), "tierkv-crossover 1");
  auto back = ParseCrossover(text);
  ASSERT_TRUE(back.ok()) << Message(back);
  EXPECT_EQ(back->cpu, c.cpu);
  EXPECT_EQ(back->kernels, c.kernels);
  EXPECT_EQ(back->max_rows, c.max_rows);
  EXPECT_NE(CpuName(), "");
}

TEST_F(CrossoverTest, ParseNamesTheBadLineAndField) {
  const std::string head = "tierkv-crossover 1\ncpu Some CPU\nkernels avx2\n";
  struct Case {
    std::string text, want;
  } cases[] = {
      {"", "line 1: not a crossover file"},
      {"tierkv-io-model 1\n", "line 1: not a crossover file"},
      {"tierkv-crossover 2\ncpu x\nkernels y\n", "line 1"},
      {"tierkv-crossover 1\nkernels avx2\n", "line 2: field cpu missing"},
      {"tierkv-crossover 1\ncpu \nkernels avx2\n", "line 2: field cpu missing"},
      {"tierkv-crossover 1\ncpu x\n", "line 3: field kernels missing"},
      {head + "Q5_0 16\n", "line 4: type Q5_0 has no in-type kernel"},
      {head + "F32 16\n", "line 4: type F32 has no in-type kernel"},
      {head + "Q9_9 16\n", "line 4: type Q9_9 has no in-type kernel"},
      {head + "Q8_0 16\nQ4_K 8\nq8_0 4\n", "line 6: type q8_0 named twice"},
      {head + "Q8_0 -1\n", "line 4: rows of Q8_0 \"-1\" not in [0, 4096]"},
      {head + "Q8_0 4097\n", "not in [0, 4096]"},
      {head + "Q8_0 12x\n", "rows of Q8_0 \"12x\""},
      {head + "Q8_0 99999999999999999999\n", "not in [0, 4096]"},
      {head + "Q8_0\n", "line 4: want \"TYPE ROWS\""},
      {head + "Q8_0 16 32\n", "line 4: want \"TYPE ROWS\""},
  };
  for (const Case& c : cases) {
    auto r = ParseCrossover(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.want), std::string::npos) << r.status().ToString() << " for:\n" << c.text;
  }
  // Blank lines and spacing are not errors.
  auto ok = ParseCrossover("tierkv-crossover 1\ncpu  Some   CPU \nkernels avx2\n\nQ8_0   16\n");
  ASSERT_TRUE(ok.ok()) << Message(ok);
  EXPECT_EQ(ok->cpu, "Some CPU");
  EXPECT_EQ(ok->max_rows, (std::vector<std::pair<GgmlType, int>>{{GgmlType::kQ8_0, 16}}));
}

TEST_F(CrossoverTest, ReadRefusesAnotherMachineOrKernelsOrAHugeFile) {
  const std::string path = WriteFile("here", FormatCrossover(Here({{GgmlType::kQ8_0, 7}})));
  auto here = ReadCrossover(path);
  ASSERT_TRUE(here.ok()) << Message(here);
  EXPECT_EQ(here->max_rows[0].second, 7);

  auto other = ReadCrossover(WriteFile("cpu", FormatCrossover({"Another CPU", DotKernelName(), {}})));
  ASSERT_FALSE(other.ok());
  EXPECT_NE(Message(other).find("was measured on \"Another CPU\""), std::string::npos) << Message(other);
  EXPECT_NE(Message(other).find("--calibrate"), std::string::npos) << Message(other);

  auto kernels = ReadCrossover(WriteFile("kernels", FormatCrossover({CpuName(), "some other kernels", {}})));
  ASSERT_FALSE(kernels.ok());
  EXPECT_NE(Message(kernels).find("with the some other kernels kernels"), std::string::npos) << Message(kernels);

  auto huge = ReadCrossover(WriteFile("huge", FormatCrossover(Here({})) + std::string(5000, '\n')));
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(Message(huge).find("more than 4096"), std::string::npos) << Message(huge);

  // Control bytes from the file are escaped in the message.
  auto escape = ParseCrossover("tierkv-crossover 1\ncpu x\nkernels y\nQ8_0 x\x1b[2J\n");
  ASSERT_FALSE(escape.ok());
  EXPECT_NE(Message(escape).find("\"x\\x1b[2J\""), std::string::npos) << Message(escape);
  EXPECT_EQ(Message(escape).find('\x1b'), std::string::npos);

  // Not a regular file: refused before it is opened (a FIFO would wait for
  // a writer forever).
  const std::string fifo = testing::MakeTempDir("crossover") + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto from_fifo = ReadCrossover(fifo);
  ASSERT_FALSE(from_fifo.ok());
  EXPECT_NE(Message(from_fifo).find("not a regular file"), std::string::npos) << Message(from_fifo);

  auto bad = ReadCrossover(WriteFile("bad", "tierkv-crossover 1\ncpu x\nkernels y\nQ8_0 much\n"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(Message(bad).find("line 4"), std::string::npos) << Message(bad);
  EXPECT_NE(Message(bad).find("/bad"), std::string::npos) << Message(bad);  // names the file

  EXPECT_FALSE(ReadCrossover(testing::MakeTempDir("crossover") + "/missing").ok());
}

TEST_F(CrossoverTest, UseChangesTheLimitProductsFollowAndEmptyRestoresTheTable) {
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kF16}) {
    EXPECT_EQ(InTypeMaxRows(t), BuiltInMaxRows(t));
    EXPECT_GT(BuiltInMaxRows(t), 0);
  }
  EXPECT_EQ(InTypeMaxRows(GgmlType::kQ5_0), 0);

  // A matrix's parts report the limit its products take.
  std::vector<float> row(256, 0.25f);
  std::string bytes;
  for (int r = 0; r < 8; ++r) QuantizeRow(GgmlType::kQ8_0, row.data(), 256, &bytes);
  WeightMatrix w;
  ASSERT_TRUE(w.AppendInPlace(GgmlType::kQ8_0, reinterpret_cast<const uint8_t*>(bytes.data()), 8, 256).ok());
  // A matrix of file rows follows the limit; packed rows (where the CPU has
  // AVX-512 VNNI) run in type at any length, whatever the limit.
  WeightMatrix packed;
  ASSERT_TRUE(packed.AppendInPlace(GgmlType::kQ8_0, reinterpret_cast<const uint8_t*>(bytes.data()), 8, 256).ok());
  packed.PackForProducts();
  ASSERT_EQ(packed.parts()[0].packed_rows, HasPacked(GgmlType::kQ8_0) ? 8 : 0);
  const int packed_limit = HasPacked(GgmlType::kQ8_0) ? std::numeric_limits<int>::max() : -1;
  auto expect_limits = [&](int file_rows) {
    EXPECT_EQ(w.parts()[0].max_rows_in_type, file_rows);
    EXPECT_EQ(packed.parts()[0].max_rows_in_type, packed_limit < 0 ? file_rows : packed_limit);
  };

  UseCrossover(Here({{GgmlType::kQ8_0, 3}, {GgmlType::kF16, 0}}));
  EXPECT_EQ(InTypeMaxRows(GgmlType::kQ8_0), 3);
  EXPECT_EQ(InTypeMaxRows(GgmlType::kF16), 0);
  EXPECT_EQ(InTypeMaxRows(GgmlType::kQ4_K), BuiltInMaxRows(GgmlType::kQ4_K));  // not named: the table's
  EXPECT_EQ(InTypeMaxRows(GgmlType::kQ5_0), 0);
  expect_limits(3);

  UseCrossover(Crossover{});
  EXPECT_EQ(InTypeMaxRows(GgmlType::kQ8_0), BuiltInMaxRows(GgmlType::kQ8_0));
  EXPECT_EQ(InTypeMaxRows(GgmlType::kF16), BuiltInMaxRows(GgmlType::kF16));
  expect_limits(BuiltInMaxRows(GgmlType::kQ8_0));
}

// The products follow the limit: at M rows above a limit of 1 the Q8_0
// product takes fp32 activations (sgemm), at or below it 8-bit ones, so the
// two give different sums for activations that 8 bits round.
TEST_F(CrossoverTest, ProductsTakeThePathTheLimitSays) {
  const int K = 256, N = 4;
  std::vector<float> row(K);
  for (int k = 0; k < K; ++k) row[k] = 0.01f * static_cast<float>((k * 37) % 23 - 11);
  std::string bytes;
  for (int r = 0; r < N; ++r) QuantizeRow(GgmlType::kQ8_0, row.data(), K, &bytes);
  WeightMatrix w;
  ASSERT_TRUE(w.AppendInPlace(GgmlType::kQ8_0, reinterpret_cast<const uint8_t*>(bytes.data()), N, K).ok());
  std::vector<float> A(2 * K);
  for (int k = 0; k < 2 * K; ++k) A[k] = 0.001f * static_cast<float>((k * 101) % 97) + 0.0003f;
  auto product = [&](int limit) {
    UseCrossover(Here({{GgmlType::kQ8_0, limit}}));
    std::vector<float> C(2 * N);
    w.MatMul(nullptr, 2, A.data(), K, 0, N, 0.f, C.data(), N);
    return C;
  };
  const std::vector<float> in_type = product(2), sgemm = product(1), again = product(4);
  EXPECT_EQ(in_type, again);
  EXPECT_NE(in_type, sgemm);
}

// A crossover changed while products run (UseCrossover is meant for before
// models run, but must not break them): each product decides every part's
// path once, so it never multiplies in type with activations it did not
// prepare, and gives either path's values.
TEST_F(CrossoverTest, ChangingTheCrossoverDuringProductsIsSafe) {
  const int K = 512, N = 256, M = 8;
  std::vector<uint8_t> bytes(static_cast<size_t>(N) * K * 2);
  for (size_t i = 0; i < bytes.size(); i += 2) {
    bytes[i] = static_cast<uint8_t>(i * 7);
    bytes[i + 1] = 0x30 + static_cast<uint8_t>(i % 8);  // F16 in [0.125, 1): finite
  }
  WeightMatrix w;
  ASSERT_TRUE(w.AppendInPlace(GgmlType::kF16, bytes.data(), N, K).ok());
  std::vector<float> A(static_cast<size_t>(M) * K);
  for (size_t i = 0; i < A.size(); ++i) A[i] = 0.001f * static_cast<float>(i % 113) - 0.05f;
  auto product = [&] {
    std::vector<float> C(static_cast<size_t>(M) * N);
    w.MatMul(ThreadPool::Compute(), M, A.data(), K, 0, N, 0.f, C.data(), N);
    return C;
  };
  UseCrossover(Here({{GgmlType::kF16, 0}}));
  const std::vector<float> sgemm = product();
  UseCrossover(Here({{GgmlType::kF16, M}}));
  const std::vector<float> in_type = product();
  std::atomic<bool> stop{false};
  std::thread flipper([&] {
    for (int i = 0; !stop.load(); ++i) UseCrossover(Here({{GgmlType::kF16, i % 2 == 0 ? 0 : M}}));
  });
  for (int round = 0; round < 200; ++round) {
    const std::vector<float> C = product();
    for (size_t i = 0; i < C.size(); ++i) {
      ASSERT_NEAR(C[i], in_type[i], 1e-3f * (1 + std::fabs(in_type[i]))) << "round " << round << " index " << i;
      ASSERT_NEAR(C[i], sgemm[i], 1e-3f * (1 + std::fabs(sgemm[i]))) << "round " << round << " index " << i;
    }
  }
  stop = true;
  flipper.join();
}

TEST_F(CrossoverTest, PublicUseCrossoverFileAppliesOrChangesNothing) {
  EXPECT_TRUE(UseCrossoverFile(WriteFile("ok", FormatCrossover(Here({{GgmlType::kQ6_K, 5}})))).ok());
  EXPECT_EQ(InTypeMaxRows(GgmlType::kQ6_K), 5);
  Status bad = UseCrossoverFile(WriteFile("bad", "tierkv-crossover 1\ncpu x\nkernels y\nQ6_K 9\n"));
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(InTypeMaxRows(GgmlType::kQ6_K), 5);
}

}  // namespace
}  // namespace tierkv::model

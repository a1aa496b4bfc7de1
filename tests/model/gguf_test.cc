#include "model/gguf.h"
#include "model/crossover.h"
#include "model/quant_dot.h"
#include "model/quant_pack.h"

#include <gtest/gtest.h>
#include <iterator>
#include <fstream>
#include <cstring>
#include <filesystem>

#include <cmath>

#include "model/test_models.h"
#include "testing/random_model.h"
#include "testing/shared.h"
#include "testing/status_matchers.h"
#include "tierkv/convert.h"
#include "tierkv/model.h"

namespace tierkv {
namespace {

using testing::IsOk;
using testing::StatusIs;

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

class GgufModelTest : public ::testing::TestWithParam<bool> {};

// A llama2.c checkpoint converted to GGUF computes the same logits (exactly in
// F32; within fp16 weight rounding in F16).
TEST_P(GgufModelTest, ConvertedModelMatchesLlama2c) {
  const bool shared = GetParam();
  const std::string dir = testing::MakeTempDir("gguf");
  const ModelConfig c = testing::TinyConfig();
  testing::WriteBytes(dir + "/m.bin", testing::MakeLlama2cBytes(c, shared, 3));
  for (bool f16 : {false, true}) {
    ConvertOptions o;
    o.input = dir + "/m.bin";
    o.output = dir + (f16 ? "/m16.gguf" : "/m32.gguf");
    o.f16 = f16;
    ASSERT_THAT(ConvertLlama2cToGguf(o), IsOk());
  }
  ASSERT_OK_AND_ASSIGN(auto a, Model::Load(dir + "/m.bin"));
  ASSERT_OK_AND_ASSIGN(auto b, Model::Load(dir + "/m32.gguf"));
  ASSERT_OK_AND_ASSIGN(auto h, Model::Load(dir + "/m16.gguf"));
  EXPECT_EQ(a->format(), "llama2c");
  EXPECT_EQ(b->format(), "gguf");
  EXPECT_EQ(b->config().ToString(), a->config().ToString());
  EXPECT_FALSE(b->embedded_vocab().has_value());
  std::vector<int32_t> tokens = {1, 5, 9, 33, 2, 60, 7};
  PrefillOptions po;
  po.logits = LogitsMode::kAll;
  ASSERT_OK_AND_ASSIGN(auto ra, a->Prefill(tokens, po));
  ASSERT_OK_AND_ASSIGN(auto rb, b->Prefill(tokens, po));
  ASSERT_OK_AND_ASSIGN(auto rh, h->Prefill(tokens, po));
  EXPECT_EQ(ra.logits, rb.logits);
  EXPECT_LT(MaxAbsDiff(ra.logits, rh.logits), 0.05);
  EXPECT_GT(MaxAbsDiff(ra.logits, rh.logits), 0.0);  // F16 really is different storage
}

INSTANTIATE_TEST_SUITE_P(SharedAndSeparateClassifier, GgufModelTest, ::testing::Bool());

std::string ValidGguf() {
  model::GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetU32("n", 7);
  w.SetStrings("words", {"a", "bc"});
  w.AddTensor("t", {4, 2}, model::GgmlType::kF32, {1, 2, 3, 4, 5, 6, 7, 8});
  return w.Serialize();
}

TEST(GgufParseTest, RoundTrip) {
  const std::string d = ValidGguf();
  ASSERT_OK_AND_ASSIGN(auto f, model::GgufFile::Parse("x.gguf", d));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(*f.GetInt("n"), 7);
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetStrings("words"), (std::vector<std::string>{"a", "bc"}));
  ASSERT_OK_AND_ASSIGN(auto t, f.ReadTensor("t", {4, 2}));
  EXPECT_EQ(t, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_THAT(f.ReadTensor("t", {2, 4}), StatusIs(StatusCode::kInvalidArgument, "shape"));
  EXPECT_THAT(f.GetInt("missing"), StatusIs(StatusCode::kNotFound, "missing"));
  EXPECT_THAT(f.GetInt("words"), StatusIs(StatusCode::kInvalidArgument));
}

TEST(GgufParseTest, EveryTruncationIsCorruptionNeverACrash) {
  const std::string d = ValidGguf();
  for (size_t n = 0; n < d.size(); ++n) {
    std::string cut = d.substr(0, n);
    auto f = model::GgufFile::Parse("cut.gguf", cut);
    // The last tensor's 32 bytes end the file, so every cut loses something.
    ASSERT_FALSE(f.ok()) << "accepted a file cut at " << n << " of " << d.size();
    EXPECT_TRUE(f.status().IsCorruption()) << f.status().ToString();
  }
}

TEST(GgufParseTest, RejectsBadMagicVersionTypeAndCounts) {
  std::string d = ValidGguf();
  std::string bad = d;
  bad[3] = 'X';
  EXPECT_THAT(model::GgufFile::Parse("m", bad), StatusIs(StatusCode::kCorruption, "magic"));
  bad = d;
  bad[4] = 9;
  EXPECT_THAT(model::GgufFile::Parse("m", bad), StatusIs(StatusCode::kInvalidArgument, "version 9"));
  bad = d;
  bad[8 + 7] = 0x7f;  // tensor count's top byte
  EXPECT_THAT(model::GgufFile::Parse("m", bad), StatusIs(StatusCode::kCorruption, "tensor count"));
  // A tensor type this build does not read is reported by the tensor's name.
  model::GgufWriter w;
  w.AddTensor("blk.0.attn_q.weight", {2}, model::GgmlType::kF32, {1, 2});
  std::string q = w.Serialize();
  const size_t type_at = q.find("blk.0.attn_q.weight") + 19 + 4 + 8;
  q[type_at] = 20;  // IQ4_NL
  EXPECT_THAT(model::GgufFile::Parse("m", q),
              StatusIs(StatusCode::kInvalidArgument, "tensor 'blk.0.attn_q.weight': tensor type 20 is not supported"));
  // A block type whose rows are not whole blocks: the size cannot be its shape's.
  q[type_at] = 2;  // Q4_0: blocks of 32
  EXPECT_THAT(model::GgufFile::Parse("m", q),
              StatusIs(StatusCode::kCorruption, "'blk.0.attn_q.weight' of type Q4_0 has rows of 2 elements"));
}

// Random byte flips: never a crash, and every refusal is a clear error
// (InvalidArgument or Corruption naming the file), never another code; a
// file that parses yields its tensor or a clear error, never a wrong size.
TEST(GgufParseTest, FuzzedBytesAreRefusedWithClearErrorsOrParse) {
  const std::string d = ValidGguf();
  std::mt19937 rng(9);
  int refused = 0, parsed = 0, tensors = 0;
  auto clear = [](const Status& s) {
    return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kCorruption ||
           s.code() == StatusCode::kNotFound;
  };
  for (int i = 0; i < 3000; ++i) {
    std::string m = d;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) m[rng() % m.size()] = static_cast<char>(rng());
    auto f = model::GgufFile::Parse("fuzz.gguf", m);
    if (!f.ok()) {
      ++refused;
      EXPECT_TRUE(f.status().code() == StatusCode::kInvalidArgument ||
                  f.status().code() == StatusCode::kCorruption)
          << f.status().ToString();
      EXPECT_NE(f.status().message().find("fuzz.gguf"), std::string::npos) << f.status().ToString();
      continue;
    }
    ++parsed;
    auto t = f->ReadTensor("t", {4, 2});
    if (t.ok()) {
      ++tensors;
      EXPECT_EQ(t->size(), 8u);
    } else {
      EXPECT_TRUE(clear(t.status())) << t.status().ToString();
    }
  }
  // Both paths ran: flips in the header are refused, flips in the data parse.
  EXPECT_GT(refused, 100);
  EXPECT_GT(tensors, 100);
  std::printf("3000 mutants: %d refused, %d parsed (%d with their tensor)\n", refused, parsed, tensors);
}

// Byte position of the u64 field that follows `key`'s string in a GGUF
// (for tensor infos: n_dims, dims, type come first; skip = their bytes).
size_t FieldAfter(const std::string& gguf, const std::string& key, size_t skip) {
  const size_t at = gguf.find(key);
  EXPECT_NE(at, std::string::npos) << key;
  return at + key.size() + skip;
}

// Two tensors whose data overlap: a damaged or forged file, refused.
TEST(GgufParseTest, OverlappingTensorDataIsCorruption) {
  model::GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.AddTensor("a", {4, 2}, model::GgmlType::kF32, {1, 2, 3, 4, 5, 6, 7, 8});
  w.AddTensor("b", {4, 2}, model::GgmlType::kF32, {8, 7, 6, 5, 4, 3, 2, 1});
  std::string d = w.Serialize();
  ASSERT_OK(model::GgufFile::Parse("ok.gguf", d).status());
  // b's offset (after its name: u32 n_dims, 2 x u64 dims, u32 type) set to a's.
  const uint64_t zero = 0;
  std::memcpy(d.data() + FieldAfter(d, std::string("\x01\0\0\0\0\0\0\0b", 9), 4 + 16 + 4), &zero, 8);
  EXPECT_THAT(model::GgufFile::Parse("forged.gguf", d).status(),
              StatusIs(StatusCode::kCorruption, "overlaps tensor"));
}

// A block count below the blocks the file holds: refused, not loaded as a
// smaller model that prints garbage.
TEST(GgufModelLoadTest, BlockCountThatDisagreesWithTheTensorsIsCorruption) {
  const std::string dir = testing::MakeTempDir("ggufblocks");
  const ModelConfig c = testing::TinyConfig();
  ASSERT_GE(c.n_layers, 2);
  testing::WriteBytes(dir + "/m.bin", testing::MakeLlama2cBytes(c, true, 3));
  ConvertOptions o;
  o.input = dir + "/m.bin";
  o.output = dir + "/m.gguf";
  ASSERT_THAT(ConvertLlama2cToGguf(o), IsOk());
  std::string g;
  {
    std::ifstream in(o.output, std::ios::binary);
    g.assign(std::istreambuf_iterator<char>(in), {});
  }
  const uint32_t fewer = static_cast<uint32_t>(c.n_layers - 1);
  std::memcpy(g.data() + FieldAfter(g, "llama.block_count", 4), &fewer, 4);  // after the u32 type
  testing::WriteBytes(dir + "/fewer.gguf", g);
  EXPECT_THAT(Model::Load(dir + "/fewer.gguf"),
              StatusIs(StatusCode::kCorruption, "llama.block_count=" + std::to_string(fewer)));
}

TEST(GgufModelLoadTest, MissingTensorAndWrongArchitectureAreNamed) {
  const std::string dir = testing::MakeTempDir("ggufbad");
  model::GgufWriter w;
  w.SetString("general.architecture", "gpt2");
  testing::WriteBytes(dir + "/a.gguf", w.Serialize());
  EXPECT_THAT(Model::Load(dir + "/a.gguf"), StatusIs(StatusCode::kInvalidArgument, "gpt2"));

  model::GgufWriter v;
  v.SetString("general.architecture", "llama");
  v.SetU32("llama.embedding_length", 8);
  v.SetU32("llama.feed_forward_length", 8);
  v.SetU32("llama.block_count", 1);
  v.SetU32("llama.attention.head_count", 2);
  v.SetU32("llama.context_length", 16);
  v.AddTensor("token_embd.weight", {8, 10}, model::GgmlType::kF32, std::vector<float>(80, 0.1f));
  v.AddTensor("output_norm.weight", {8}, model::GgmlType::kF32, std::vector<float>(8, 1.0f));
  testing::WriteBytes(dir + "/b.gguf", v.Serialize());
  EXPECT_THAT(Model::Load(dir + "/b.gguf"),
              StatusIs(StatusCode::kNotFound, "tensor 'blk.0.attn_norm.weight' is missing"));
}

TEST(GgufModelLoadTest, WeightStorageNamesRoundTrip) {
  for (WeightStorage w : {WeightStorage::kAuto, WeightStorage::kFp32, WeightStorage::kMapped}) {
    ASSERT_OK_AND_ASSIGN(WeightStorage back, ParseWeightStorage(WeightStorageName(w)));
    EXPECT_EQ(back, w);
  }
  EXPECT_THAT(ParseWeightStorage("q8"), StatusIs(StatusCode::kInvalidArgument, "weights 'q8' is not one of"));
}

// --weights mapped keeps the matrices in the file's types (their rows copied
// out of the mapped file into huge pages where the kernel has them): the logits are those of the same file held in fp32
// (llama and qwen2 with biases and a tied output: every matrix, the
// embedding rows and the output) for a prefill longer than any product
// multiplied in the file's type (InTypeMaxRows), whose rows go through
// sgemm on dequantized tiles. Rows packed for this CPU (model/quant_pack.h)
// multiply in type whatever the product's length: their activations round
// to 8 bits, as llama.cpp's do (the kernels' bound is tested in
// quant_dot_test.cc and weight_matrix_test.cc); here the logits stay within
// that rounding's few percent, where a wrong row or block would not.
TEST(GgufModelLoadTest, MappedWeightsGiveTheLogitsOfFp32Weights) {
  const int kSgemmRows = model::InTypeMaxRows(model::GgmlType::kQ8_0) + 1;
  const std::string dir = testing::MakeTempDir("ggufmapped");
  ModelLoadOptions fp32, mapped;
  fp32.weights = WeightStorage::kFp32;
  mapped.weights = WeightStorage::kMapped;
  for (const bool qwen : {false, true}) {
    testing::RandomModelSpec spec;
    spec.arch = qwen ? "qwen2" : "llama";
    spec.biases = spec.tied = qwen;
    const std::string f32 = dir + "/" + spec.arch + ".gguf";
    testing::WriteRandomModel(f32, spec);
    for (const std::string type : {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q5_1"}) {
      SCOPED_TRACE(spec.arch + " " + type);
      const std::string file = dir + "/" + spec.arch + "-" + type + ".gguf";
      ASSERT_THAT(QuantizeGguf(f32, file, type), IsOk());
      ASSERT_OK_AND_ASSIGN(auto a, Model::Load(file, fp32));
      ASSERT_OK_AND_ASSIGN(auto b, Model::Load(file, mapped));
      ASSERT_OK_AND_ASSIGN(auto c, Model::Load(file));
      EXPECT_EQ(a->weight_storage(), WeightStorage::kFp32);
      EXPECT_EQ(b->weight_storage(), WeightStorage::kMapped);
      // auto: a small model in fp32, unless every matrix is quantized with an in-type kernel.
      const bool in_type = type == "Q8_0" || type == "Q4_0";
      EXPECT_EQ(c->weight_storage(), in_type ? WeightStorage::kMapped : WeightStorage::kFp32) << "auto";
      EXPECT_EQ(a->content_hash(), b->content_hash());
      if (type == "F32") {
        EXPECT_EQ(b->weight_bytes(), a->weight_bytes());
      } else {
        EXPECT_LT(b->weight_bytes(), a->weight_bytes() * 6 / 10);
      }
      std::vector<int32_t> tokens(kSgemmRows);
      for (int i = 0; i < kSgemmRows; ++i) tokens[i] = (i * 37 + 3) % a->config().vocab_size;
      PrefillOptions po;
      po.logits = LogitsMode::kAll;
      ASSERT_OK_AND_ASSIGN(PrefillResult ra, a->Prefill(tokens, po));
      ASSERT_OK_AND_ASSIGN(PrefillResult rb, b->Prefill(tokens, po));
      ASSERT_EQ(ra.logits.size(), rb.logits.size());
      double scale = 1;
      for (float x : ra.logits) scale = std::max(scale, std::fabs(double(x)));
      ASSERT_OK_AND_ASSIGN(const model::GgmlType t, model::ParseGgmlType(type));
      EXPECT_LT(MaxAbsDiff(ra.logits, rb.logits), (model::HasPacked(t) ? 0.06 : 1e-5) * scale);
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tierkv

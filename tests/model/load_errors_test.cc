// Issue #2, must-show 5: bad model files, mismatched tokenizers and prompts
// that do not fit get a clear status naming the problem, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <sentencepiece_trainer.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "model/test_models.h"
#include "testing/shared.h"
#include "testing/status_matchers.h"
#include "tierkv/convert.h"
#include "tierkv/generate.h"

namespace tierkv {
namespace {

using testing::IsOk;
using testing::StatusIs;
using testing::Stories;
using testing::WriteBytes;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class LoadErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TIERKV_REQUIRE_SHARED("models/stories260K/stories260K.bin");
    dir_ = testing::MakeTempDir("bad");
    good_ = Slurp(Stories("stories260K.bin"));
    ASSERT_GT(good_.size(), 1000u);
  }
  std::string Write(const std::string& name, const std::string& bytes) {
    WriteBytes(dir_ + "/" + name, bytes);
    return dir_ + "/" + name;
  }
  std::string dir_, good_;
};

TEST_F(LoadErrorsTest, TruncatedLlama2c) {
  for (size_t n : {size_t{0}, size_t{10}, size_t{28}, good_.size() / 2, good_.size() - 4}) {
    auto m = Model::Load(Write("t.bin", good_.substr(0, n)));
    EXPECT_THAT(m, StatusIs(StatusCode::kCorruption)) << n;
    if (n >= 28) {
      EXPECT_THAT(m, StatusIs(StatusCode::kCorruption, "truncated")) << n;
    }
  }
  EXPECT_THAT(Model::Load(Write("long.bin", good_ + "xx")),
              StatusIs(StatusCode::kCorruption, "longer than its header says"));
}

TEST_F(LoadErrorsTest, CorruptedHeaderAndWeights) {
  std::string bad = good_;
  int32_t v = 7;  // n_heads = 7 does not divide dim = 64
  std::memcpy(bad.data() + 12, &v, 4);
  EXPECT_THAT(Model::Load(Write("h.bin", bad)), StatusIs(StatusCode::kCorruption, "n_heads=7"));
  bad = good_;
  v = -3;
  std::memcpy(bad.data() + 8, &v, 4);
  EXPECT_THAT(Model::Load(Write("l.bin", bad)), StatusIs(StatusCode::kCorruption, "n_layers=-3"));
  bad = good_;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bad.data() + 28 + 4 * 40000, &nan, 4);
  EXPECT_THAT(Model::Load(Write("nan.bin", bad)), StatusIs(StatusCode::kCorruption, "non-finite"));
}

TEST_F(LoadErrorsTest, WrongMagic) {
  // Text, a versioned llama2.c export, and a GGUF with a damaged magic.
  EXPECT_THAT(Model::Load(Write("text.bin", std::string(4096, 'a'))),
              StatusIs(StatusCode::kCorruption, "not a GGUF file"));
  std::string v1 = good_;
  std::memcpy(v1.data(), "24ka", 4);
  EXPECT_THAT(Model::Load(Write("v1.bin", v1)),
              StatusIs(StatusCode::kInvalidArgument, "versioned export"));
  ConvertOptions o;
  o.input = Stories("stories260K.bin");
  o.output = dir_ + "/s.gguf";
  ASSERT_THAT(ConvertLlama2cToGguf(o), IsOk());
  std::string g = Slurp(o.output);
  ASSERT_THAT(Model::Load(o.output), IsOk());
  g[0] = 'g';
  EXPECT_THAT(Model::Load(Write("g.gguf", g)), StatusIs(StatusCode::kCorruption, "not a GGUF file"));
  g = Slurp(o.output);
  EXPECT_THAT(Model::Load(Write("gt.gguf", g.substr(0, g.size() / 2))),
              StatusIs(StatusCode::kCorruption, "past the end of the file"));
  EXPECT_THAT(Model::Load(dir_ + "/missing.gguf"), StatusIs(StatusCode::kNotFound, "missing.gguf"));
}

// convert refuses to overwrite its input, to write onto a directory (and
// leaves no temporary behind), and names a GGUF input for what it is.
TEST_F(LoadErrorsTest, ConvertRefusesItsInputADirectoryAndAGguf) {
  const std::string bin = Write("m.bin", Slurp(Stories("stories260K.bin")));
  ConvertOptions o;
  o.input = bin;
  o.output = bin;
  EXPECT_THAT(ConvertLlama2cToGguf(o), StatusIs(StatusCode::kInvalidArgument, "is the input file"));
  EXPECT_EQ(Slurp(bin), Slurp(Stories("stories260K.bin")));  // untouched
  std::filesystem::create_directories(dir_ + "/outdir");
  o.output = dir_ + "/outdir";
  EXPECT_THAT(ConvertLlama2cToGguf(o), StatusIs(StatusCode::kInvalidArgument, "is a directory"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/outdir.tmp"));
  o.output = dir_ + "/m.gguf";
  ASSERT_THAT(ConvertLlama2cToGguf(o), IsOk());
  o.input = o.output;
  o.output = dir_ + "/again.gguf";
  EXPECT_THAT(ConvertLlama2cToGguf(o), StatusIs(StatusCode::kInvalidArgument, "already a GGUF file"));
}

// A failed rename (the target is a directory) leaves no temporary file.
TEST_F(LoadErrorsTest, AtomicWriteLeavesNoTemporaryWhenTheRenameFails) {
  std::filesystem::create_directories(dir_ + "/target/sub");
  EXPECT_FALSE(WriteFileAtomically(FileSystem::Default(), dir_ + "/target", "data").ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/target.tmp"));
}

TEST_F(LoadErrorsTest, TokenizerVocabularyMustMatchTheModel) {
  ASSERT_OK_AND_ASSIGN(auto m, Model::Load(Stories("stories260K.bin")));
  // A llama2.c tokenizer with fewer and with more entries than the model's 512.
  const std::string tok = Slurp(Stories("tok512.bin"));
  EXPECT_THAT(LoadTokenizerFor(*m, Write("short.bin", tok.substr(0, tok.size() / 2))),
              StatusIs(StatusCode::kInvalidArgument, "the model's vocabulary has 512"));
  std::string extra = tok;
  const float score = 0;
  const int32_t len = 1;
  extra.append(reinterpret_cast<const char*>(&score), 4);
  extra.append(reinterpret_cast<const char*>(&len), 4);
  extra += "z";
  EXPECT_THAT(LoadTokenizerFor(*m, Write("long.bin", extra)),
              StatusIs(StatusCode::kInvalidArgument, "more than the model's 512"));
  // A real SentencePiece model of another vocabulary size.
  const std::string corpus = Write("corpus.txt", Slurp(Stories("../../data/corpus/austen.txt")).substr(0, 200000));
  auto st = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + corpus + " --model_prefix=" + dir_ + "/other --vocab_size=300 --model_type=bpe"
      " --minloglevel=2");
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_THAT(LoadTokenizerFor(*m, dir_ + "/other.model"),
              StatusIs(StatusCode::kInvalidArgument, "has 300 tokens but the model's vocabulary has 512"));
  EXPECT_THAT(LoadTokenizerFor(*m, Write("junk.model", "not a model")),
              StatusIs(StatusCode::kInvalidArgument, "SentencePiece"));
  // No tokenizer at all for a model without an embedded one.
  EXPECT_THAT(LoadTokenizerFor(*m, ""), StatusIs(StatusCode::kInvalidArgument, "--tokenizer"));
}

TEST_F(LoadErrorsTest, PromptLongerThanTheContext) {
  ASSERT_OK_AND_ASSIGN(auto m, Model::Load(Stories("stories260K.bin")));
  ASSERT_OK_AND_ASSIGN(auto t, LoadTokenizerFor(*m, Stories("tok512.model")));
  std::string prompt;
  for (int i = 0; i < 300; ++i) prompt += "Lily and Ben ";
  GenerateOptions o;
  o.max_tokens = 5;
  EXPECT_THAT(Generate(*m, *t, prompt, o),
              StatusIs(StatusCode::kInvalidArgument, "the model's context is 512 tokens"));
  // Regression: max_tokens near INT_MAX once overflowed the KV reservation.
  o.max_tokens = std::numeric_limits<int>::max();
  ASSERT_OK_AND_ASSIGN(auto big, Generate(*m, *t, "Lily", o));
  EXPECT_LE(big.prompt_tokens.size() + big.output_tokens.size(), 513u);
  // A prompt that fits but leaves little room stops at the context limit.
  prompt.resize(1400);
  o.max_tokens = 500;
  ASSERT_OK_AND_ASSIGN(auto r, Generate(*m, *t, prompt, o));
  EXPECT_LE(r.prompt_tokens.size() + r.output_tokens.size(), 513u);
}

}  // namespace
}  // namespace tierkv

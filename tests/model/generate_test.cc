// stories260K (real pretrained weights) generates the llama2.c reference
// continuation through every loading path.
#include <gtest/gtest.h>

#include "testing/shared.h"
#include "testing/status_matchers.h"
#include "tierkv/convert.h"
#include "tierkv/generate.h"

namespace tierkv {
namespace {

using testing::IsOk;
using testing::Stories;

constexpr char kPrompt[] = "Once upon a time, there was a little girl named Lily";
constexpr char kReference[] = ". She loved to play outside in the park. One day, she saw a big, red ball.";

std::string Greedy(const std::string& model_path, const std::string& tok_path, KvDType kv) {
  auto m = Model::Load(model_path);
  EXPECT_THAT(m, IsOk());
  if (!m.ok()) return "";
  auto t = LoadTokenizerFor(**m, tok_path);
  EXPECT_THAT(t, IsOk());
  if (!t.ok()) return "";
  GenerateOptions o;
  o.max_tokens = 40;
  o.kv_dtype = kv;
  auto r = Generate(**m, **t, kPrompt, o);
  EXPECT_THAT(r, IsOk());
  return r.ok() ? r->text : "";
}

TEST(GenerateTest, Stories260KGreedyMatchesLlama2cReference) {
  TIERKV_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  for (const char* tok : {"tok512.model", "tok512.bin"}) {
    for (KvDType kv : {KvDType::kF32, KvDType::kF16}) {
      const std::string text = Greedy(Stories("stories260K.bin"), Stories(tok), kv);
      EXPECT_EQ(text.rfind(kReference, 0), 0u) << tok << " " << KvDTypeName(kv) << ": " << text;
    }
  }
}

TEST(GenerateTest, GgufConversionsGenerateTheSameText) {
  TIERKV_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  const std::string dir = testing::MakeTempDir("gen");
  for (bool f16 : {false, true}) {
    ConvertOptions o;
    o.input = Stories("stories260K.bin");
    o.tokenizer = Stories(f16 ? "tok512.bin" : "tok512.model");
    o.output = dir + "/s.gguf";
    o.f16 = f16;
    ASSERT_THAT(ConvertLlama2cToGguf(o), IsOk());
    const std::string text = Greedy(o.output, "", KvDType::kF32);
    EXPECT_EQ(text.rfind(kReference, 0), 0u) << (f16 ? "f16: " : "f32: ") << text;
  }
}

TEST(GenerateTest, SeededSamplingIsRepeatable) {
  TIERKV_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  ASSERT_OK_AND_ASSIGN(auto m, Model::Load(Stories("stories260K.bin")));
  ASSERT_OK_AND_ASSIGN(auto t, LoadTokenizerFor(*m, Stories("tok512.model")));
  GenerateOptions o;
  o.max_tokens = 30;
  o.sampler = {0.9f, 0.9f, 123};
  ASSERT_OK_AND_ASSIGN(auto a, Generate(*m, *t, "Once upon a time", o));
  ASSERT_OK_AND_ASSIGN(auto b, Generate(*m, *t, "Once upon a time", o));
  EXPECT_EQ(a.text, b.text);
  o.sampler.seed = 124;
  ASSERT_OK_AND_ASSIGN(auto c, Generate(*m, *t, "Once upon a time", o));
  EXPECT_FALSE(c.text.empty());
}

}  // namespace
}  // namespace tierkv

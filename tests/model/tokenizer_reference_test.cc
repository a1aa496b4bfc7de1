// The GGUF tokenizers against llama.cpp's own test cases
// (../shared/reference/tokenizers: vocabulary-only GGUF files of Llama 3,
// Qwen2 and Llama 2, inputs, and the ids llama.cpp produces without BOS):
// every case must give llama.cpp's ids exactly, and decoding them must give
// the input back where the tokenizer is lossless.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "testing/shared.h"
#include "tierkv/tokenizer.h"

namespace tierkv {
namespace {

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// X.gguf.inp: inputs separated by lines "__ggml_vocab_test__"; X.gguf.out:
// one line of space-separated ids per input.
std::vector<Case> ReadCases(const std::string& gguf) {
  const std::string inp = ReadAll(gguf + ".inp"), sep = "\n__ggml_vocab_test__\n";
  std::vector<Case> cases;
  for (size_t at = 0; at < inp.size();) {
    size_t end = inp.find(sep, at);
    if (end == std::string::npos) end = inp.size();
    cases.push_back({inp.substr(at, end - at), {}});
    at = end + sep.size();
  }
  std::istringstream out(ReadAll(gguf + ".out"));
  std::string line;
  for (Case& c : cases) {
    if (!std::getline(out, line)) break;
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
  }
  return cases;
}

void CheckVocab(const std::string& name, bool lossless) {
  const std::string rel = "reference/tokenizers/" + name;
  TIERKV_REQUIRE_SHARED(rel);
  const std::string path = testing::SharedPath(rel);
  auto tok = LoadGgufTokenizer(path);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::vector<Case> cases = ReadCases(path);
  ASSERT_GE(cases.size(), 40u) << path;
  size_t equal = 0;
  for (const Case& c : cases) {
    auto ids = (*tok)->Encode(c.text, /*add_bos=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_EQ(*ids, c.ids) << name << ": '" << c.text << "'";
    equal += *ids == c.ids;
    if (lossless) {
      EXPECT_EQ((*tok)->Decode(*ids), c.text) << name;
    }
  }
  std::printf("%s: %zu of %zu cases equal to llama.cpp's ids\n", name.c_str(), equal, cases.size());
}

TEST(TokenizerReferenceTest, Llama3ByteBpeGivesLlamaCppsIds) { CheckVocab("ggml-vocab-llama-bpe.gguf", true); }

TEST(TokenizerReferenceTest, Qwen2ByteBpeGivesLlamaCppsIds) { CheckVocab("ggml-vocab-qwen2.gguf", true); }

TEST(TokenizerReferenceTest, Llama2SentencePieceGivesLlamaCppsIds) { CheckVocab("ggml-vocab-llama-spm.gguf", false); }

TEST(TokenizerReferenceTest, SequencesStartWithBosAsTheVocabularySays) {
  TIERKV_REQUIRE_SHARED("reference/tokenizers/ggml-vocab-qwen2.gguf");
  auto llama3 = LoadGgufTokenizer(testing::SharedPath("reference/tokenizers/ggml-vocab-llama-bpe.gguf"));
  auto qwen2 = LoadGgufTokenizer(testing::SharedPath("reference/tokenizers/ggml-vocab-qwen2.gguf"));
  ASSERT_TRUE(llama3.ok() && qwen2.ok());
  auto a = (*llama3)->Encode("Hello", true);
  auto b = (*qwen2)->Encode("Hello", true);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->front(), 128000) << "Llama 3 adds <|begin_of_text|>";
  EXPECT_EQ(*b, *(*qwen2)->Encode("Hello", false)) << "Qwen2 adds no BOS";
  // Control tokens' text is text; user-defined tokens are split out whole.
  auto ctl = (*qwen2)->Encode("<|im_start|>", false);
  ASSERT_TRUE(ctl.ok());
  EXPECT_GT(ctl->size(), 1u);
  auto pad = (*qwen2)->Encode("a[PAD151646]b", false);
  ASSERT_TRUE(pad.ok());
  ASSERT_EQ(pad->size(), 3u);
  EXPECT_EQ((*pad)[1], 151646);
  EXPECT_EQ((*qwen2)->Decode(*pad), "a[PAD151646]b");
}

}  // namespace
}  // namespace tierkv

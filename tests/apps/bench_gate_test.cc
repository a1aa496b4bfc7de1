// The accuracy gate of `tierkv bench --suite quick` on a real model, as CI
// runs it: RULER-style retrieval written by tools/prompts/make_tasks.py
// ruler --size quick, on SmolLM2-135M-Instruct (docs/accuracy.md).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "testing/shared.h"
#include "testing/shell.h"
#include "tierkv/model_packages.h"

namespace tierkv {
namespace {

using testing::Shell;

// The accuracy gate on a real model: RULER-style retrieval (make_tasks.py
// ruler --size quick) on SmolLM2-135M-Instruct through the quick suite.
// Needs `make models` (CI runs it).
class RetrievalGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TIERKV_REQUIRE_SHARED("data/wikitext2/test.txt");
    if (std::system("command -v python3 >/dev/null 2>&1") != 0) GTEST_SKIP() << "needs python3 for make_tasks.py";
    auto model = ResolveModelFlag("smollm2");
    if (!model.ok()) GTEST_SKIP() << model.status().message() << " (CI does: make models)";
    dir_ = testing::MakeTempDir("bench_gate");
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  // Writes make_tasks.py ruler --size quick `args` to dir_/name.jsonl.
  std::string Workload(const std::string& name, const std::string& args) {
    std::string log;
    const std::string path = dir_ + "/" + name + ".jsonl";
    EXPECT_EQ(Shell("python3 " + std::string(TIERKV_SOURCE_DIR) + "/tools/prompts/make_tasks.py ruler --shared " +
                        TIERKV_SHARED_DIR + " --size quick " + args + " --out " + path + " 2>&1",
                    &log),
              0)
        << log;
    return path;
  }
  // Runs the quick suite on SmolLM2; returns its exit status, the log in *log.
  int Bench(const std::string& workload, const std::string& out, const std::string& flags, std::string* log) {
    return Shell(std::string(TIERKV_BINARY) + " bench --suite quick --model smollm2 " + flags + " --workload " +
                     workload + " --out " + dir_ + "/" + out + " 2>&1",
                 log);
  }
  nlohmann::json Results(const std::string& out) {
    std::ifstream in(dir_ + "/" + out + "/results.json");
    return nlohmann::json::parse(in);
  }
  std::string dir_;
};

// With the default selection impress and spec (and impress's ablations) stay
// within the gate's tolerance of recompute, which finds the single needles.
TEST_F(RetrievalGateTest, PassesWithTheDefaultSelection) {
  const std::string w = Workload("ruler", "");
  std::string log;
  ASSERT_EQ(Bench(w, "ok", "", &log), 0) << log;
  const nlohmann::json j = Results("ok");
  ASSERT_TRUE(j.contains("gate")) << log;
  EXPECT_TRUE(j["gate"]["passed"].get<bool>()) << j["gate"].dump();
  EXPECT_EQ(j["gate"]["tolerance"].get<double>(), 0.15);
  EXPECT_EQ(j["gate"]["checked"].get<int>(), 4);  // impress-itf, impress-ro, impress, spec
  const nlohmann::json& rec = j["experiments"][0]["runs"][0]["result"]["systems"]["recompute"]["quality"]["answers"];
  EXPECT_GE(rec["tasks"]["niah_single"]["score"].get<double>(), 0.8) << rec.dump();
}

// With the least important rows kept (--select-lowest) the gate fails,
// exit 3, naming the systems that fell below.
TEST_F(RetrievalGateTest, FailsWithTheLowestScoredRows) {
  const std::string w = Workload("needles", "--tasks niah_single");
  std::string log;
  EXPECT_EQ(Bench(w, "wrong", "--select-lowest", &log), 3) << log;
  EXPECT_NE(log.find("bench: accuracy gate failed: "), std::string::npos) << log;
  const nlohmann::json j = Results("wrong");
  EXPECT_FALSE(j["gate"]["passed"].get<bool>());
  EXPECT_FALSE(j["gate"]["failures"].empty());
}

}  // namespace
}  // namespace tierkv

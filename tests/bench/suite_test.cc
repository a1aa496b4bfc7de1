// The suites of tierkv bench (tierkv/tools/bench_suite.h) on the default model: a
// suite stopped after a run resumes from what it wrote and runs only what
// is missing; results of another suite or other workload bytes are refused.
#include "tierkv/tools/bench_suite.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/model_fixture.h"
#include "testing/shared.h"

namespace tierkv::bench {
namespace {

using nlohmann::json;

class SuiteTest : public engine::DefaultModelTest {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("suite");
    std::filesystem::create_directories(dir_ + "/scratch");
    std::ofstream f(dir_ + "/tiny.jsonl");
    f << R"({"document": "d", "text": "Once upon a time there was a little girl who lived by the sea. She liked to walk on the sand and look for shells. One day she found a big shell that could sing."})"
      << "\n";
    for (int i = 0; i < 2; ++i) {
      f << R"({"id": "q)" << i << R"(", "task": "t", "prefix_doc": "d", "query": "\nQuestion: what did she find?\nAnswer:", "choices": [" a shell", " a dog"], "label": 0})"
        << "\n";
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  SuiteOptions Options() {
    SuiteOptions o;
    o.suite = Suite::kQuick;  // two runs: systems, exact
    o.workloads = {dir_ + "/tiny.jsonl"};
    o.base.cache_dir = dir_ + "/scratch";
    o.warmup = 0;
    o.rounds = 1;
    o.identity = {{"flag", "a"}};
    o.progress = [this](const std::string& what, size_t done, size_t total) {
      if (done == total) stages_.push_back(what);
    };
    return o;
  }
  std::unique_ptr<Tokenizer> Tok() {
    auto t = LoadTokenizerFor(*model_, "");
    EXPECT_TRUE(t.ok());
    return std::move(t).value();
  }
  size_t Ran() const {  // harness stages ended, not counting kept runs
    size_t n = 0;
    for (const std::string& s : stages_) n += s.find("kept from") == std::string::npos;
    return n;
  }

  // Runs the suite until its first checkpoint, which stops it as a kill
  // after that write would: *saved is what the checkpoint was given.
  void StopAfterTheFirstRun(const Tokenizer& tok, json* saved) {
    SuiteOptions o = Options();
    o.checkpoint = [saved](const json& partial) {
      *saved = partial;
      return Status::Cancelled("stopped here");
    };
    auto stopped = RunSuite(*model_, tok, o);
    ASSERT_FALSE(stopped.ok());
    EXPECT_NE(stopped.status().message().find("stopped here"), std::string::npos);
  }

  std::string dir_;
  std::vector<std::string> stages_;
};

TEST_F(SuiteTest, AStoppedSuiteResumesFromItsCheckpointAndRunsOnlyWhatIsMissing) {
  auto tok = Tok();
  json saved;
  ASSERT_NO_FATAL_FAILURE(StopAfterTheFirstRun(*tok, &saved));
  SuiteOptions o;
  ASSERT_TRUE(saved.is_object());
  EXPECT_FALSE(saved.contains("finished"));
  EXPECT_EQ(saved["runs_total"], 2);
  EXPECT_EQ(saved["runs_done"], 1);
  ASSERT_EQ(saved["experiments"][0]["runs"].size(), 1u);
  EXPECT_TRUE(saved["experiments"][1]["runs"].empty());
  const size_t first_stages = Ran();

  // The partial results go through the file, as the CLI resumes them.
  ASSERT_TRUE(WriteReport(saved, dir_ + "/out").ok());
  auto previous = ReadUnfinishedResults(dir_ + "/out");
  ASSERT_TRUE(previous.ok()) << previous.status().ToString();
  ASSERT_FALSE(previous->is_null());
  o = Options();
  stages_.clear();
  o.previous = *previous;
  auto resumed = RunSuite(*model_, *tok, o);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_TRUE(resumed->contains("finished"));
  EXPECT_EQ((*resumed)["runs_done"], 2);
  EXPECT_EQ((*resumed)["started"], saved["started"]);
  EXPECT_EQ((*resumed)["resumed"].size(), 1u);
  // The first run is the saved one, not a new measurement; the second ran.
  EXPECT_EQ((*resumed)["experiments"][0]["runs"][0], saved["experiments"][0]["runs"][0]);
  ASSERT_EQ((*resumed)["experiments"][1]["runs"].size(), 1u);
  EXPECT_TRUE((*resumed)["experiments"][1]["runs"][0]["result"]["systems"].contains("impress"));
  EXPECT_GT(first_stages, 0u);
  for (const std::string& s : stages_) EXPECT_EQ(s.find("systems-tiny"), std::string::npos) << s;

  // A finished suite is not resumed: a new one replaces it.
  ASSERT_TRUE(WriteReport(*resumed, dir_ + "/out").ok());
  auto again = ReadUnfinishedResults(dir_ + "/out");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->is_null());
}

TEST_F(SuiteTest, SystemsRunOnlyThoseGivenAndSayWhich) {
  auto tok = Tok();
  SuiteOptions o = Options();
  o.systems = {engine::System::kImpress, engine::System::kAsLike};
  auto r = RunSuite(*model_, *tok, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["settings"]["systems"], json({"impress", "as-like"}));
  size_t runs = 0;
  for (const json& e : (*r)["experiments"]) {
    for (const json& run : e["runs"]) {
      ++runs;
      for (const auto& [name, sys] : run["result"]["systems"].items()) {
        EXPECT_TRUE(name == "impress" || name == "as-like") << e["id"] << " ran " << name;
      }
    }
  }
  EXPECT_EQ(runs, 2u);  // quick: systems and exact both hold impress
  // exact checks against as-like: without it, it is not run.
  o = Options();
  o.systems = {engine::System::kImpress};
  auto unchecked = RunSuite(*model_, *tok, o);
  ASSERT_TRUE(unchecked.ok()) << unchecked.status().ToString();
  EXPECT_EQ((*unchecked)["runs_total"], 1);
  // recompute reuses nothing: the exact experiment (reusing systems at
  // 1.0) has none left and is not run.
  o = Options();
  o.systems = {engine::System::kRecompute};
  stages_.clear();
  auto alone = RunSuite(*model_, *tok, o);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  ASSERT_EQ((*alone)["experiments"].size(), 1u);
  EXPECT_EQ((*alone)["runs_total"], 1);
  EXPECT_EQ((*alone)["experiments"][0]["runs"][0]["result"]["systems"].size(), 1u);
  // Nothing reuses: no store is written.
  EXPECT_EQ((*alone)["experiments"][0]["runs"][0]["result"]["stored_bytes"], 0);
  for (const std::string& s : stages_) EXPECT_EQ(s.find("storing"), std::string::npos) << s;
  EXPECT_FALSE(stages_.empty());
}

TEST_F(SuiteTest, UnfinishedResultsOfAnotherSuiteAreRefusedNamingWhatDiffers) {
  auto tok = Tok();
  json saved;
  ASSERT_NO_FATAL_FAILURE(StopAfterTheFirstRun(*tok, &saved));
  SuiteOptions o = Options();
  o.previous = saved;
  o.identity = {{"flag", "b"}};
  auto r = RunSuite(*model_, *tok, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("identity.flags.flag differs"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("--fresh"), std::string::npos);

  // The workload's bytes changed (same name, same requests' count).
  std::ofstream(dir_ + "/tiny.jsonl", std::ios::app) << "\n";
  o = Options();
  o.previous = saved;
  r = RunSuite(*model_, *tok, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("identity.workloads[0].xxh3 differs"), std::string::npos)
      << r.status().ToString();

  o.previous = json();
  o.retention = 0.5;
  EXPECT_TRUE(RunSuite(*model_, *tok, o).ok()) << "null previous: afresh";
}

TEST_F(SuiteTest, ResultsThatAreNotAnUnfinishedSuiteAreAnErrorNamingTheFile) {
  std::filesystem::create_directories(dir_ + "/bad");
  std::ofstream(dir_ + "/bad/results.json") << "{\"suite\": ";
  auto r = ReadUnfinishedResults(dir_ + "/bad");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(dir_ + "/bad/results.json"), std::string::npos) << r.status().ToString();
  std::ofstream(dir_ + "/bad/results.json") << R"({"suite": "quick", "started": "x"})";
  r = ReadUnfinishedResults(dir_ + "/bad");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'identity'"), std::string::npos) << r.status().ToString();
  auto none = ReadUnfinishedResults(dir_ + "/nothing-here");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->is_null());
}

// The paper suite's `disk` setting is "2%/5%": as a directory name it was
// two levels, and the run failed to create its store.
TEST(RunDirNameTest, ASettingOrWorkloadNameIsOnePathComponent) {
  EXPECT_EQ(RunDirName("disk-fewshot-2%/5%"), "disk-fewshot-2__5_");
  EXPECT_EQ(RunDirName("pool-my docs-0.02"), "pool-my_docs-0.02");
  EXPECT_EQ(RunDirName("systems-chat"), "systems-chat");
  EXPECT_EQ(std::filesystem::path(RunDirName("a/../b")).filename().string(), RunDirName("a/../b"));
}

}  // namespace
}  // namespace tierkv::bench

namespace tierkv::bench {
namespace {

// The accuracy gate reads a suite's results: every selective system's
// generation score against recompute's in the same run, within the tolerance.
TEST(AccuracyGateTest, ASelectiveSystemBelowRecomputeByMoreThanTheToleranceFails) {
  const auto sys = [](double score) {
    return nlohmann::json{{"quality", {{"answers", {{"score", score}}}}}};
  };
  nlohmann::json suite = {{"experiments", nlohmann::json::array()}};
  nlohmann::json run = {{"workload", "ruler"}, {"value", nullptr},
                        {"result", {{"systems", {{"recompute", sys(0.9)}, {"as-like", sys(0.2)},
                                                 {"impress", sys(0.80)}, {"spec", sys(0.70)},
                                                 {"car", sys(0.1)}}}}}};
  // Without recompute or without generation tasks a run is not checked.
  nlohmann::json no_ref = {{"workload", "w"}, {"value", "1.0"}, {"result", {{"systems", {{"impress", sys(0.0)}}}}}};
  suite["experiments"].push_back({{"id", "systems"}, {"runs", {run, no_ref}}});
  const std::vector<engine::System> gated = {engine::System::kImpress, engine::System::kSpec};
  const nlohmann::json g = AccuracyGate(suite, 0.15, gated);
  EXPECT_EQ(g["checked"], 2);  // impress, spec: as-like and car are not gated
  ASSERT_EQ(g["failures"].size(), 1u);
  EXPECT_EQ(g["failures"][0]["system"], "spec");
  EXPECT_DOUBLE_EQ(g["failures"][0]["recompute"].get<double>(), 0.9);
  EXPECT_FALSE(g["passed"].get<bool>());
  EXPECT_TRUE(g["applicable"].get<bool>());
  EXPECT_TRUE(AccuracyGate(suite, 0.25, gated)["passed"].get<bool>());
  // No run with recompute's answers: nothing checked, and the gate says so.
  nlohmann::json none = {{"experiments", {{{"id", "systems"}, {"runs", {no_ref}}}}}};
  EXPECT_FALSE(AccuracyGate(none, 0.15, gated)["applicable"].get<bool>());
  EXPECT_EQ(AccuracyGate(none, 0.15, gated)["checked"], 0);
  // A gated system without a score (its quality pass failed to score) fails.
  suite["experiments"][0]["runs"][0]["result"]["systems"]["impress"] = nlohmann::json::object();
  EXPECT_FALSE(AccuracyGate(suite, 0.5, gated)["passed"].get<bool>());
  EXPECT_FALSE(AccuracyGate(suite, 0.25, {engine::System::kCar})["passed"].get<bool>());
}

}  // namespace
}  // namespace tierkv::bench

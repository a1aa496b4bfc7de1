// `tierkv bench --suite quick` end to end, as CI runs it: the workloads
// generated from ../shared by tools/prompts/make_tasks.py, the binary run,
// and its results.json checked (every system present, retention 1.0 exact
// against fp16-KV reuse, accuracy fields present) with its report.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "testing/shared.h"
#include "testing/shell.h"
#include "tierkv/engine.h"

namespace tierkv {
namespace {

using testing::Shell;

TEST(BenchCliTest, QuickSuiteReportsEverySystemExactlyAtRetentionOne) {
  TIERKV_REQUIRE_SHARED("data/piqa/valid.jsonl");
  if (std::system("command -v python3 >/dev/null 2>&1") != 0) GTEST_SKIP() << "needs python3 for make_tasks.py";
  const std::string dir = testing::MakeTempDir("bench_quick");
  std::string log;
  ASSERT_EQ(Shell("python3 " + std::string(TIERKV_SOURCE_DIR) + "/tools/prompts/make_tasks.py suite --size quick --out " +
                    dir + "/w --shared " + TIERKV_SHARED_DIR + " 2>&1",
                &log),
            0)
      << log;
  const std::string bench = std::string(TIERKV_BINARY) + " bench --suite quick --workload " + dir +
                            "/w/fewshot.jsonl --workload " + dir + "/w/docqa.jsonl --workload " + dir +
                            "/w/chat.jsonl --out " + dir + "/out 2>&1";
  ASSERT_EQ(Shell(bench, &log), 0) << log;
  std::ifstream in(dir + "/out/results.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["suite"], "quick");
  std::set<std::string> exps;
  for (const auto& e : j["experiments"]) {
    exps.insert(e["id"].get<std::string>());
    for (const auto& run : e["runs"]) {
      const nlohmann::json& sys = run["result"]["systems"];
      for (engine::System s : engine::AllSystems()) {
        const std::string name(engine::SystemName(s));
        if (e["id"] == "exact" && !engine::TraitsOf(s).reuses) continue;
        ASSERT_TRUE(sys.contains(name)) << e["id"] << " " << run["workload"] << ": " << name;
        const nlohmann::json& q = sys[name]["quality"];
        EXPECT_GT(sys[name]["ttft_ms_mean"].get<double>(), 0);
        EXPECT_TRUE(q.contains("top1_agree") && q.contains("kl_mean")) << name;
        // Every workload's requests carry a task; fewshot and docqa have choices.
        if (run["workload"] != "chat") {
          ASSERT_FALSE(q["tasks"].empty()) << name;
          for (const auto& [task, t] : q["tasks"].items()) {
            EXPECT_TRUE(t.contains("accuracy") && t.contains("agree_with_recompute")) << task;
          }
        }
        if (e["id"] == "exact") {
          // Prefixes stored in whole chunks: every serve reuses what as-like does.
          EXPECT_EQ(q["max_abs_logit_diff_vs_as_like"].get<double>(), 0.0) << name << " at retention 1.0";
          EXPECT_EQ(q["compared_with_as_like"], q["serves"]) << name;
        }
      }
    }
  }
  EXPECT_EQ(exps, (std::set<std::string>{"systems", "exact"}));
  // piqa is labelled: its accuracy is a number for recompute.
  const auto& first = j["experiments"][0]["runs"][0]["result"]["systems"]["recompute"]["quality"]["tasks"];
  ASSERT_TRUE(first.contains("piqa"));
  EXPECT_TRUE(first["piqa"]["accuracy"].is_number());
  EXPECT_EQ(::access((dir + "/out/report.md").c_str(), R_OK), 0);
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    EXPECT_EQ(::access((dir + "/out/fig-systems.png").c_str(), R_OK), 0) << log;
  }
  std::filesystem::remove_all(dir);
}

TEST(BenchCliTest, BadInputIsAClearError) {
  std::string out;
  EXPECT_NE(Shell(std::string(TIERKV_BINARY) + " bench --suite nope --workload x 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("--suite"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(Shell(std::string(TIERKV_BINARY) + " bench --workload /nonexistent.jsonl --out /tmp 2>&1", &out), 1) << out;
  EXPECT_NE(out.find("cannot read request file /nonexistent.jsonl"), std::string::npos) << out;
  // --systems: unknown names, and a list that leaves the gate (on by
  // default in the quick suite) nothing to compare, fail before any work.
  out.clear();
  EXPECT_EQ(Shell(std::string(TIERKV_BINARY) + " bench --workload /nonexistent.jsonl --systems impress,nope 2>&1", &out), 1)
      << out;
  EXPECT_NE(out.find("--systems: unknown system 'nope'"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(Shell(std::string(TIERKV_BINARY) + " bench --workload /nonexistent.jsonl --systems as-like,car 2>&1", &out), 1)
      << out;
  EXPECT_NE(out.find("leaves the accuracy gate nothing to check"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(Shell(std::string(TIERKV_BINARY) + " bench --workload /nonexistent.jsonl --systems impress 2>&1", &out), 1)
      << out;
  EXPECT_NE(out.find("leaves the accuracy gate nothing to check"), std::string::npos) << out;
  out.clear();  // without the gate, the list is taken and the bad file is what fails
  EXPECT_EQ(Shell(std::string(TIERKV_BINARY) +
                      " bench --workload /nonexistent.jsonl --systems car --accuracy-gate -1 2>&1",
                  &out),
            1)
      << out;
  EXPECT_NE(out.find("cannot read request file"), std::string::npos) << out;
}

}  // namespace
}  // namespace tierkv

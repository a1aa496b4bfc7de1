// The report's accuracy section (bench/accuracy_report.h): its tables, and
// its plots drawn whatever the names hold (a title or path with a quote once
// ended gnuplot's string and the plot silently failed).
#include "bench/accuracy_report.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "testing/shared.h"

namespace tierkv::bench {
namespace {

using nlohmann::json;

json System(double score, double ttft_ms, double disk_bytes) {
  json by_depth = {{"1024", {{"0.0", {{"score", score}}}, {"0.5", {{"score", 1.0}}}}},
                   {"2048", {{"0.0", {{"score", 1.0}}}, {"0.5", {{"score", score}}}}}};
  json answers = {{"score", score},
                  {"worse_than_recompute", score < 1.0 ? 1 : 0},
                  {"tasks", {{"niah_single", {{"score", score}, {"by_depth", by_depth}}}}}};
  return {{"quality", {{"answers", answers}, {"cold", {{"ttft_ms_p50", ttft_ms}, {"disk_bytes_mean", disk_bytes}}}}}};
}

json Experiment() {
  json runs = json::array();
  for (const char* value : {"0.1", "0.25"}) {
    runs.push_back({{"workload", "Bob's needles"},
                    {"value", value},
                    {"result", {{"systems", {{"recompute", System(1.0, 900, 0)}, {"impress", System(0.5, 300, 2e7)}}}}}});
  }
  return {{"id", "accuracy"}, {"param", "retention"}, {"runs", runs}};
}

TEST(AccuracyReportTest, TablesAndPlotsWithQuotesInNames) {
  const std::string dir = testing::MakeTempDir("it's a report");
  ASSERT_FALSE(dir.empty());
  const std::string section = AccuracySection(Experiment(), dir);
  EXPECT_NE(section.find("### Bob's needles retention=0.25: scores"), std::string::npos) << section;
  EXPECT_NE(section.find("| impress | 0.500 | 0.500 | 300.0 | 20.00 | 1 |"), std::string::npos) << section;
  // recompute read no bytes: a labelled line on the log axis, not a point
  // (the script is written whether or not gnuplot runs it).
  std::ifstream gp(dir + "/fig-accuracy-score-bytes.dat.gp");
  const std::string script((std::istreambuf_iterator<char>(gp)), std::istreambuf_iterator<char>());
  EXPECT_NE(script.find("'recompute, Bob''s needles (at 0 disk MB read per request): 1.000'"), std::string::npos)
      << script;
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::filesystem::remove_all(dir);
    GTEST_SKIP() << "gnuplot not installed: the tables and scripts are checked, the plots are not";
  }
  EXPECT_EQ(section.find("no PNG"), std::string::npos) << section;
  for (const char* png : {"fig-accuracy-score-ttft.png", "fig-accuracy-score-bytes.png",
                          "fig-accuracy-heat-Bob's needles-impress-niah_single.png"}) {
    EXPECT_GT(std::filesystem::file_size(dir + "/" + png), 1000u) << png;
  }
  std::filesystem::remove_all(dir);
}

TEST(AccuracyReportTest, OnlyRecomputeHasNoBytesPlotButSaysItsScore) {
  const std::string dir = testing::MakeTempDir("recompute-only");
  ASSERT_FALSE(dir.empty());
  json exp = Experiment();
  for (json& run : exp["runs"]) run["result"]["systems"].erase("impress");
  const std::string section = AccuracySection(exp, dir);
  EXPECT_NE(section.find("(no accuracy-score-bytes plot: no system read anything; scores: recompute, Bob's needles 1.000)"),
            std::string::npos)
      << section;
  EXPECT_EQ(section.find("gnuplot failed"), std::string::npos) << section;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tierkv::bench

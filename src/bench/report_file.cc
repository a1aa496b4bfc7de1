// WriteReport (tierkv/tools/bench_suite.h): results.json, report.md and a PNG per
// experiment.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "bench/accuracy_report.h"
#include "bench/llamacpp.h"
#include "bench/report_format.h"
#include "tierkv/tools/bench_suite.h"
#include "tierkv/filesystem.h"
#include "tierkv/tools/plot.h"

namespace tierkv::bench {

namespace {

using nlohmann::json;

// The systems of an experiment's runs, in the order the first run lists them.
std::vector<std::string> Systems(const json& exp) {
  std::vector<std::string> out;
  for (const auto& [name, j] : exp["runs"][0]["result"]["systems"].items()) out.push_back(name);
  return out;
}

// A clustered histogram of `field` (under "quality" when `quality`) per
// run and system; returns the report's line about it.
std::string PlotExperiment(const json& exp, const std::string& dir, const std::string& field, bool quality,
                           const std::string& ylabel) {
  const std::string id = exp["id"].get<std::string>() + (quality ? "-" + field : "");
  const std::string dat = dir + "/fig-" + id + ".dat", png = "fig-" + id + ".png";
  const std::vector<std::string> systems = Systems(exp);
  {
    std::ofstream d(dat);
    d << "run";
    for (const std::string& s : systems) d << " " << s;
    d << "\n";
    for (const json& run : exp["runs"]) {
      std::string label = RunLabel(run, exp["param"].get<std::string>());
      for (char& c : label) c = c == ' ' ? '_' : c;
      d << label;
      for (const std::string& s : systems) {
        const json& j = run["result"]["systems"][s];
        const json& src = quality ? (j.contains("quality") ? j["quality"] : json()) : j;
        d << " " << (src.is_object() && src.contains(field) ? src[field].get<double>() : 0.0);
      }
      d << "\n";
    }
  }
  std::ofstream g(dat + ".gp");
  g << "set terminal pngcairo noenhanced size 1000,520\nset output " << GpQuote(dir + "/" + png) << "\n"
    << "set title " << GpQuote(exp["id"].get<std::string>() + ": " + ylabel) << "\nset ylabel '" << ylabel << "'\n"
    << "set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.85 border -1\n"
    << "set key outside right\nset grid ytics\nset xtics rotate by -20\nset yrange [0:*]\n"
    << "plot for [i=2:" << systems.size() + 1 << "] " << GpQuote(dat) << " using i:xtic(1) title columnheader(i)\n";
  g.close();
  const std::string what = RunGnuplot(dat + ".gp", dir + "/" + png);
  return what.rfind("wrote", 0) == 0 ? "![" + id + "](" + png + ")\n\n" : "(" + what + " for " + id + ")\n\n";
}

// When the suite ran, and how far when it has not finished.
std::string Span(const json& suite) {
  std::string s = "Run from " + suite["started"].get<std::string>();
  if (suite.contains("resumed")) s += " (resumed " + std::to_string(suite["resumed"].size()) + " times)";
  if (suite.contains("finished")) return s + " to " + suite["finished"].get<std::string>();
  return "**Unfinished** (" + std::to_string(suite.value("runs_done", 0)) + " of " +
         std::to_string(suite.value("runs_total", 0)) + " runs; `tierkv bench` with the same flags resumes it). " + s;
}

std::string Header(const json& suite) {
  std::ostringstream s;
  s << "# tierkv bench --suite " << suite["suite"].get<std::string>() << "\n\n"
    << Span(suite) << " on " << suite["machine"].value("cpu", std::string("an unknown CPU")) << " ("
    << suite["machine"].value("cores", 0) << " cores, " << suite["machine"].value("kernel", std::string("?"))
    << "). Every raw figure is in `results.json`.\n\n"
    << "How to read it: times on a shared machine drift by tens of percent between runs, so compare systems "
       "by their ratio within one run (the systems of a run take turns, in alternating order, over the same "
       "requests and the same store), never by absolute times across runs or reports.\n\n"
    << "Settings: " << suite["settings"].dump() << "\n\n| workload | requests | with choices | prefix tokens (mean) |\n"
    << "|---|---:|---:|---:|\n";
  for (const auto& [name, w] : suite["workloads"].items()) {
    s << "| " << name << " | " << w["requests"] << " | " << w["with_choices"] << " | "
      << static_cast<long>(w["prefix_tokens_mean"].get<double>()) << " |\n";
  }
  return s.str() + "\n";
}

}  // namespace

Status WriteReport(const json& suite, const std::string& out_dir) {
  if (out_dir.find_first_of("\n\r") != std::string::npos) {
    return Status::InvalidArgument("report directory: a line break in its name");
  }
  std::error_code ec;
  // Absolute: every path gnuplot reads or writes starts with '/', never
  // with what its syntax reads as a pipe ('<', '|') or an option ('-').
  const std::string dir = std::filesystem::absolute(out_dir, ec).string();
  if (ec) return Status::IOError("cannot resolve " + out_dir + ": " + ec.message());
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir + ": " + ec.message());
  // Atomic: an unfinished suite resumes from this file, so a stop while it
  // is written must leave the previous one.
  RETURN_IF_ERROR(WriteFileAtomically(FileSystem::Default(), dir + "/results.json", suite.dump(1) + "\n"));
  std::ostringstream md;
  md << Header(suite) << LlamaCppSection(suite);
  for (const json& exp : suite["experiments"]) {
    md << "## " << exp["id"].get<std::string>() << ": " << exp["title"].get<std::string>() << "\n\n";
    if (exp["runs"].empty()) continue;
    const json& first = exp["runs"][0]["result"]["systems"];
    // Timed rounds only (the accuracy suite's runs have the quality pass alone).
    if (!first.empty() && first.begin()->contains("ttft_ms_mean")) {
      md << PlotExperiment(exp, dir, "ttft_ms_mean", false, "TTFT mean (ms)");
    }
    if (!first.empty() && first.begin()->contains("quality")) {
      md << PlotExperiment(exp, dir, "top1_agree", true, "top-1 agreement with recompute");
    }
    md << AccuracySection(exp, dir);
    for (const json& run : exp["runs"]) {
      md << "### " << RunLabel(run, exp["param"].get<std::string>()) << "\n\n" << HarnessTable(run["result"]);
    }
  }
  if (suite.contains("gate")) {
    const json& g = suite["gate"];
    md << "## Accuracy gate\n\nThe generation-task score (mean over a workload's requests) of " << g["systems"].dump()
       << " at least recompute's minus " << g["tolerance"].dump() << " in every run with both: ";
    if (!g.value("applicable", true)) {
      md << "**not applicable** (no run had recompute and generation tasks)\n\n";
    } else {
      md << (g["passed"].get<bool>() ? "**passed**" : "**failed**") << " (" << g["checked"].dump()
         << " system runs checked)\n\n";
    }
    for (const json& f : g["failures"]) md << "- " << f.dump() << "\n";
    md << "\n";
  }
  std::ofstream m(dir + "/report.md");
  m << md.str();
  if (!m) return Status::IOError("cannot write " + dir + "/report.md");
  return Status::Ok();
}

}  // namespace tierkv::bench

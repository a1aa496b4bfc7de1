// The report's accuracy section (bench/accuracy_report.h): the generation
// tasks' scores per system, task and run; accuracy against a cold request's
// TTFT and against its disk reads, one point per system and run; and a
// depth x length heatmap per system and task, as needle-in-a-haystack
// reports draw them.
#include "bench/accuracy_report.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "bench/report_format.h"
#include "tierkv/tools/plot.h"

namespace tierkv::bench {

namespace {

using nlohmann::json;

const json* Answers(const json& sys) {
  if (!sys.contains("quality") || !sys["quality"].contains("answers")) return nullptr;
  return &sys["quality"]["answers"];
}

bool HasAnswers(const json& exp) {
  for (const json& run : exp["runs"]) {
    for (const auto& [name, sys] : run["result"]["systems"].items()) {
      if (Answers(sys)) return true;
    }
  }
  return false;
}

// One table per run: per system the overall score, each task's, the cold
// TTFT p50 and disk reads, and how many answers were worse than recompute's.
std::string ScoreTable(const json& run, const std::string& label) {
  const json& systems = run["result"]["systems"];
  std::set<std::string> tasks;
  for (const auto& [name, sys] : systems.items()) {
    if (const json* a = Answers(sys)) {
      for (const auto& [t, v] : (*a)["tasks"].items()) tasks.insert(t);
    }
  }
  std::ostringstream s;
  s << "### " << label << "\n\n| system | score |";
  for (const std::string& t : tasks) s << " " << t << " |";
  s << " cold TTFT p50 ms | disk MB / request | worse than recompute |\n|---|---:|";
  for (size_t i = 0; i < tasks.size(); ++i) s << "---:|";
  s << "---:|---:|---:|\n";
  for (const auto& [name, sys] : systems.items()) {
    const json* a = Answers(sys);
    if (!a) continue;
    s << "| " << name << " | " << Fmt("%.3f", (*a)["score"].get<double>()) << " |";
    for (const std::string& t : tasks) {
      s << " " << ((*a)["tasks"].contains(t) ? Fmt("%.3f", (*a)["tasks"][t]["score"].get<double>()) : "") << " |";
    }
    const json& cold = sys["quality"]["cold"];
    s << " " << Fmt("%.1f", cold["ttft_ms_p50"].get<double>()) << " | "
      << Fmt("%.2f", cold["disk_bytes_mean"].get<double>() / 1e6) << " | " << (*a)["worse_than_recompute"] << " |\n";
  }
  return s.str() + "\n";
}

// Score against a cold request's TTFT (x = "ttft_ms_p50") or its disk reads
// (x = "disk_bytes_mean", in MB): one line per system through its runs
// (retentions), each point labelled with its setting. A system at x = 0
// (recompute reads nothing) cannot sit on the log axis: its score is a
// dashed horizontal line, labelled.
std::string Scatter(const json& exp, const std::string& dir, const std::string& x, const std::string& xlabel) {
  const std::string id = exp["id"].get<std::string>() + "-score-" + (x == "ttft_ms_p50" ? "ttft" : "bytes");
  const std::string dat = dir + "/fig-" + id + ".dat", png = "fig-" + id + ".png";
  const double scale = x == "ttft_ms_p50" ? 1.0 : 1e-6;
  std::map<std::string, std::vector<std::string>> rows;  // system -> "x score label" per run
  std::set<std::pair<std::string, double>> at_zero;      // ("system, workload", score) at x = 0
  for (const json& run : exp["runs"]) {
    for (const auto& [name, sys] : run["result"]["systems"].items()) {
      const json* a = Answers(sys);
      if (!a) continue;
      const double xv = sys["quality"]["cold"][x].get<double>() * scale;
      if (!(xv > 0)) {
        at_zero.insert({name + ", " + run["workload"].get<std::string>(), (*a)["score"].get<double>()});
        continue;
      }
      std::ostringstream r;
      r << xv << " " << (*a)["score"].get<double>() << " "
        << (run["value"].is_null() ? run["workload"].get<std::string>() : run["value"].get<std::string>());
      rows[name].push_back(r.str());
    }
  }
  // Nothing to draw on a log axis (every system read nothing: bench
  // --systems recompute): no plot, its scores said in words.
  if (rows.empty()) {
    std::string s;
    for (const auto& [name, score] : at_zero) s += (s.empty() ? "" : "; ") + name + " " + Fmt("%.3f", score);
    return "(no " + id + " plot: no system read anything" + (s.empty() ? "" : "; scores: " + s) + ")\n\n";
  }
  std::string names;
  {
    std::ofstream d(dat);
    for (const auto& [name, lines] : rows) {
      names += (names.empty() ? "" : " ") + name;
      for (const std::string& l : lines) d << l << "\n";
      d << "\n\n";  // one gnuplot index per system
    }
  }
  std::ofstream g(dat + ".gp");
  g << "set terminal pngcairo noenhanced size 1000,620\nset output " << GpQuote(dir + "/" + png) << "\n"
    << "set title " << GpQuote(exp["id"].get<std::string>() + ": score against " + xlabel +
                               " (cold requests; labels: each run's setting)")
    << "\nset xlabel '" << xlabel
    << "'\nset ylabel 'score (share of expected strings)'\nset grid\nset logscale x\nset yrange [0:1.05]\n"
    << "set key outside right\nnames = '" << names << "'\n";
  for (const auto& [name, score] : at_zero) {
    g << "set arrow from graph 0, first " << score << " to graph 1, first " << score << " nohead dt 2 lw 2\n"
      << "set label " << GpQuote(name + " (at 0 " + xlabel + "): " + Fmt("%.3f", score)) << " at graph 0.02, first "
      << score + 0.02 << " font ',9'\n";
  }
  g
    << "plot for [i=1:words(names)] " << GpQuote(dat) << " index (i-1) using 1:2 with linespoints pt 7 title word(names, i), "
    << "for [i=1:words(names)] '' index (i-1) using 1:2:3 with labels offset char 0.6,0.6 font ',7' notitle\n";
  g.close();
  const std::string what = RunGnuplot(dat + ".gp", dir + "/" + png);
  return what.rfind("wrote", 0) == 0 ? "![" + id + "](" + png + ")\n\n" : "(" + what + " for " + id + ")\n\n";
}

// A depth x length heatmap of one system's score on one task in one run.
std::string Heatmap(const json& by_depth, const std::string& dir, const std::string& id, const std::string& title) {
  std::vector<std::string> lengths, depths;
  std::set<std::string> dset;
  for (const auto& [len, cells] : by_depth.items()) {
    lengths.push_back(len);
    for (const auto& [d, c] : cells.items()) dset.insert(d);
  }
  depths.assign(dset.begin(), dset.end());
  if (lengths.empty() || depths.size() < 2) return "";
  std::sort(lengths.begin(), lengths.end(), [](const std::string& a, const std::string& b) { return std::stoi(a) < std::stoi(b); });
  const std::string dat = dir + "/fig-" + id + ".dat", png = "fig-" + id + ".png";
  {
    std::ofstream d(dat);
    for (size_t yi = 0; yi < lengths.size(); ++yi) {
      for (size_t xi = 0; xi < depths.size(); ++xi) {
        const json& row = by_depth[lengths[yi]];
        // An empty cell (no request at that depth and length) is NaN,
        // which gnuplot leaves blank, not a lost answer.
        d << xi << " " << yi << " ";
        if (row.contains(depths[xi])) {
          d << row[depths[xi]]["score"].get<double>() << "\n";
        } else {
          d << "NaN\n";
        }
      }
      d << "\n";
    }
  }
  std::ofstream g(dat + ".gp");
  g << "set terminal pngcairo noenhanced size 760,420\nset output " << GpQuote(dir + "/" + png) << "\n"
    << "set title " << GpQuote(title) << "\nset xlabel 'needle depth'\nset ylabel 'length (tokens)'\n"
    << "set cbrange [0:1]\nset palette defined (0 '#b2182b', 0.5 '#fddbc7', 1 '#2166ac')\nset view map\n"
    << "set xrange [-0.5:" << depths.size() - 0.5 << "]\nset yrange [-0.5:" << lengths.size() - 0.5 << "]\nset xtics (";
  for (size_t i = 0; i < depths.size(); ++i) g << (i ? ", " : "") << "'" << depths[i] << "' " << i;
  g << ")\nset ytics (";
  for (size_t i = 0; i < lengths.size(); ++i) g << (i ? ", " : "") << "'" << lengths[i] << "' " << i;
  g << ")\nplot " << GpQuote(dat) << " using 1:2:3 with image notitle\n";
  g.close();
  const std::string what = RunGnuplot(dat + ".gp", dir + "/" + png);
  return what.rfind("wrote", 0) == 0 ? "![" + id + "](" + png + ")\n" : "(" + what + " for " + id + ")\n";
}

// Heatmaps of the runs whose setting is `value` (the accuracy suite's
// headline retention), per system and task with depths.
std::string Heatmaps(const json& exp, const std::string& dir, const std::string& value) {
  std::ostringstream s;
  for (const json& run : exp["runs"]) {
    if (run["value"].is_null() || run["value"].get<std::string>() != value) continue;
    for (const auto& [name, sys] : run["result"]["systems"].items()) {
      const json* a = Answers(sys);
      if (!a) continue;
      for (const auto& [task, t] : (*a)["tasks"].items()) {
        if (!t.contains("by_depth")) continue;
        const std::string id = exp["id"].get<std::string>() + "-heat-" + run["workload"].get<std::string>() + "-" +
                               name + "-" + task;
        s << Heatmap(t["by_depth"], dir, id, name + " " + task + " (" + RunLabel(run, exp["param"].get<std::string>()) + ")");
      }
    }
  }
  const std::string out = s.str();
  return out.empty() ? "" : "Score by needle depth and length at retention " + value + ":\n\n" + out + "\n";
}

}  // namespace

std::string AccuracySection(const json& exp, const std::string& dir) {
  if (exp["runs"].empty() || !HasAnswers(exp)) return "";
  std::ostringstream s;
  s << "Generation tasks (greedy answers scored as RULER's string_match_all; TTFT and disk reads: the quality "
       "pass's own serves, each system starting from empty pools, so a request whose prefix an earlier one "
       "shared finds what that one loaded):\n\n";
  for (const json& run : exp["runs"]) s << ScoreTable(run, RunLabel(run, exp["param"].get<std::string>()) + ": scores");
  s << Scatter(exp, dir, "ttft_ms_p50", "cold TTFT p50 (ms)");
  s << Scatter(exp, dir, "disk_bytes_mean", "disk MB read per request");
  s << Heatmaps(exp, dir, "0.25");
  return s.str();
}

}  // namespace tierkv::bench

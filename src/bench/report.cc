// The benchmark's report (tierkv/tools/bench_suite.h): results.json, report.md and
// gnuplot's PNGs.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "bench/report_format.h"
#include "tierkv/tools/bench_suite.h"

namespace tierkv::bench {

namespace {

using nlohmann::json;

double Num(const json& j, const char* key) { return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0; }

// "acc 0.712 (agree 0.95)" per task, or "" without choices.
std::string Accuracy(const json& q) {
  std::string out;
  if (!q.contains("tasks")) return out;
  for (const auto& [task, t] : q["tasks"].items()) {
    if (!out.empty()) out += "; ";
    out += task + ": ";
    out += t["accuracy"].is_null() ? "unlabelled" : "acc " + Fmt("%.3f", t["accuracy"].get<double>());
    out += ", agree " + Fmt("%.3f", t["agree_with_recompute"].get<double>());
  }
  return out;
}

// The largest logit difference from as-like over the serves that reused as
// many tokens as as-like did, and how many those were.
std::string ExactColumn(const json& q) {
  if (!q.contains("compared_with_as_like")) return "";
  const json& d = q["max_abs_logit_diff_vs_as_like"];
  return (d.is_number() ? Fmt("%.3g", d.get<double>()) : std::string("-")) + " (" +
         std::to_string(q["compared_with_as_like"].get<size_t>()) + "/" + std::to_string(q["serves"].get<size_t>()) + ")";
}

// TTFT ratios of every system against as-like and as-h2o-lfu, mean and p99.
std::string Ratios(const json& systems) {
  std::ostringstream s;
  for (const char* base : {"as-like", "as-h2o-lfu"}) {
    if (!systems.contains(base)) continue;
    const json& b = systems[base];
    if (!(Num(b, "ttft_ms_mean") > 0)) continue;  // no timed rounds (the accuracy suite): nothing to compare
    s << "TTFT against " << base << " (mean, p99):";
    for (const auto& [name, j] : systems.items()) {
      if (name == base) continue;
      s << " " << name << " " << Fmt("%.3f", Num(j, "ttft_ms_mean") / Num(b, "ttft_ms_mean")) << "× ("
        << Fmt("%.3f", Num(j, "ttft_ms_p99") / Num(b, "ttft_ms_p99")) << "×);";
    }
    s << "\n\n";
  }
  return s.str();
}

}  // namespace

std::string HarnessTable(const json& run) {
  const json& systems = run["systems"];
  bool quality = false;
  for (const auto& [name, j] : systems.items()) quality |= j.contains("quality");
  std::ostringstream s;
  s << "| system | TTFT mean ms | p50 | p99 | load wait | identify | compute | disk MB | disk chunks | "
       "device hit | disk / ideal |";
  if (quality) s << " top-1 | KL | max Δlogit vs as-like (serves compared) | task accuracy |";
  s << "\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|";
  if (quality) s << "---:|---:|---:|---|";
  s << "\n";
  for (const auto& [name, j] : systems.items()) {
    s << "| " << name << " | " << Fmt("%.1f", Num(j, "ttft_ms_mean")) << " | " << Fmt("%.1f", Num(j, "ttft_ms_p50"))
      << " | " << Fmt("%.1f", Num(j, "ttft_ms_p99")) << " | " << Fmt("%.1f", Num(j, "load_wait_ms_mean")) << " | "
      << Fmt("%.1f", Num(j, "identify_ms_mean")) << " | " << Fmt("%.1f", Num(j, "compute_ms_mean")) << " | "
      << Fmt("%.1f", Num(j, "disk_bytes_read") / 1e6) << " | " << Fmt("%.0f", Num(j, "disk_chunks_read")) << " | "
      << Fmt("%.3f", Num(j, "device_hit_ratio")) << " | " << Fmt("%.3f", Num(j, "disk_bytes_per_ideal")) << " |";
    if (quality && j.contains("quality")) {
      const json& q = j["quality"];
      s << " " << Fmt("%.4f", Num(q, "top1_agree")) << " | " << Fmt("%.4g", Num(q, "kl_mean")) << " | "
        << ExactColumn(q)
        << " | " << Accuracy(q) << " |";
    } else if (quality) {
      s << " | | | |";
    }
    s << "\n";
  }
  s << "\n" << Ratios(systems);
  return s.str();
}

}  // namespace tierkv::bench

// llama.cpp beside tierkv in the report (tierkv/tools/bench_suite.h): the
// runner's results (tools/llamacpp/runner.py) read, checked and compared.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/llamacpp.h"
#include "bench/report_format.h"
#include "tierkv/tools/bench_suite.h"

namespace tierkv::bench {

namespace {

using nlohmann::json;

// The systems experiment's result on `workload`, or null.
const json* SystemsRun(const json& suite, const std::string& workload) {
  for (const json& e : suite["experiments"]) {
    if (e["id"] != "systems") continue;
    for (const json& run : e["runs"]) {
      if (run["workload"] == workload) return &run["result"]["systems"];
    }
  }
  return nullptr;
}

}  // namespace

Result<json> ReadLlamaCppResults(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read llama.cpp results " + path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(path + ": not JSON: " + e.what());
  }
  auto bad = [&](const std::string& field) {
    return Status::InvalidArgument(path + ": field '" + field + "' is missing or of the wrong type (not a result of tools/llamacpp/runner.py bench?)");
  };
  if (!j.is_object()) return bad("(top level)");
  if (!j.contains("workload") || !j["workload"].is_string()) return bad("workload");
  for (const char* k : {"full_prefill_ttft_ms", "restore_ttft_ms"}) {
    if (!j.contains(k) || !j[k].is_object()) return bad(k);
    for (const char* f : {"mean", "p50", "p99"}) {
      if (!j[k].contains(f) || !j[k][f].is_number()) return bad(std::string(k) + "." + f);
    }
  }
  for (const char* k : {"requests", "prefill_tokens_per_s_mean", "restore_first_token_agrees_with_full"}) {
    if (!j.contains(k) || !j[k].is_number()) return bad(k);
  }
  return j;
}

void AddLlamaCpp(const json& results, json* suite) {
  const std::string stem = std::filesystem::path(results["workload"].get<std::string>()).stem().string();
  (*suite)["llamacpp"][stem] = results;
}

std::string LlamaCppSection(const json& suite) {
  if (!suite.contains("llamacpp")) return "";
  std::ostringstream s;
  s << "## llama.cpp beside tierkv\n\n"
    << "llama.cpp (built natively from llama-cpp-python's PyPI source, tools/llamacpp/runner.py) on the same model and "
       "requests, run just before this suite: its full prefill against `recompute`, and its saved state of the "
       "prefix restored from a file, then the query, against the reuse systems. Ratios are tierkv's TTFT over "
       "llama.cpp's (below 1: tierkv is faster).\n\n"
    << "| workload | llama.cpp full prefill ms | recompute ms | recompute / full | prefill tok/s llama.cpp | "
       "llama.cpp restore ms | as-like / restore | impress / restore | spec / restore | restore agrees |\n"
    << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& [workload, l] : suite["llamacpp"].items()) {
    const double full = l["full_prefill_ttft_ms"]["mean"].get<double>();
    const double restore = l["restore_ttft_ms"]["mean"].get<double>();
    const json* sys = SystemsRun(suite, workload);
    auto mean = [&](const char* name) {
      return sys && sys->contains(name) ? (*sys)[name]["ttft_ms_mean"].get<double>() : -1.0;
    };
    auto ratio = [](double a, double b) { return a < 0 ? std::string("-") : Fmt("%.3f", a / b); };
    s << "| " << workload << " | " << Fmt("%.1f", full) << " | " << Fmt("%.1f", mean("recompute")) << " | "
      << ratio(mean("recompute"), full) << " | " << Fmt("%.0f", l["prefill_tokens_per_s_mean"].get<double>()) << " | "
      << Fmt("%.1f", restore) << " | " << ratio(mean("as-like"), restore) << " | " << ratio(mean("impress"), restore)
      << " | " << ratio(mean("spec"), restore) << " | "
      << Fmt("%.2f", l["restore_first_token_agrees_with_full"].get<double>()) << " |\n";
  }
  return s.str() + "\n";
}

}  // namespace tierkv::bench

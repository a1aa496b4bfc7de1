// tierkv bench: the papers' experiments as suites of harness runs
// (tierkv/tools/harness.h), and the report they make (docs/bench.md).
//   quick  CI's subset (minutes): every system on each workload at retention
//          0.25 with task accuracy and fidelity, and every reusing system at
//          retention 1.0 against as-like (fp16-KV reuse: exact)
//   paper  IMPRESS's evaluation: TTFT and load time per system and workload
//          (Figures 16, 17, tail latency, device hit ratio, spec's recall,
//          per-layer retention: 19), the ablation (18), chunks read with and
//          without reordering (20), pool policy score against LFU (21), alpha
//          (22), chunk size (23), pool size against the stored K/V (24), and
//          retention against task accuracy
// A workload is a request file (docs/workloads.md); its name is the file's
// stem. Experiments that compare settings run on the first workload.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tierkv/engine.h"
#include "tierkv/model.h"
#include "tierkv/status.h"
#include "tierkv/tokenizer.h"

namespace tierkv::bench {

enum class Suite { kQuick, kPaper, kSystems, kAccuracy };
std::string_view SuiteName(Suite s);
// quick, paper, systems (every system on each workload, the first
// experiment of paper alone) or accuracy (every system on each workload at
// retention 0.1, 0.25 and 0.5, the quality pass alone: task accuracy, with
// each request's TTFT and disk reads as the quality pass serves it); InvalidArgument
// naming them.
Result<Suite> ParseSuite(std::string_view name);

struct SuiteOptions {
  Suite suite = Suite::kQuick;
  std::vector<std::string> workloads;  // request files; at least one
  engine::EngineOptions base;          // cache_dir: the scratch directory (each run gets its own store)
  double retention = 0.25;
  double device_share = 0.10, host_share = 0.30;
  int warmup = 1, rounds = 3;          // quick: 0 and 1 unless set
  // The accuracy gate (< 0: none): once the suite is done, the generation-
  // task score (make_tasks.py ruler) of each system GatedSystems() names,
  // in every run, must be at least recompute's minus this; results' "gate"
  // says which fell below (AccuracyGate).
  double accuracy_gate = -1;
  // Testing the gate: the selective systems keep their least important rows
  // (EngineOptions::select_lowest).
  bool select_lowest = false;
  // Only these of each experiment's systems (empty: all of them); an
  // experiment left with none is not run, and none left at all is an error.
  std::vector<engine::System> systems;
  // Called with what runs and how far (may be empty).
  std::function<void(const std::string& what, size_t done, size_t total)> progress;
  // What else decides the results (the caller's engine flags, as text): a
  // kept run belongs to this suite only when it, the suite, its settings,
  // the model's weights and every workload file's bytes are the same.
  nlohmann::json identity;
  // An unfinished suite's results (ReadUnfinishedResults): its runs are
  // kept and not run again. A suite of another identity is refused with
  // the first field that differs. Null: start afresh.
  nlohmann::json previous;
  // Called after each run with the results so far ("finished" absent), so
  // that a stopped suite resumes from what it wrote. An error stops it.
  std::function<Status(const nlohmann::json& partial)> checkpoint;
};

// Runs the suite: {"suite", "machine", "started", "identity", "runs_total",
// "runs_done", "workloads": {...}, "experiments": [{"id", "title", "param",
// "runs": [{"workload", "value", "result", "finished"}]}], "finished"}.
// Errors name the workload or the experiment.
Result<nlohmann::json> RunSuite(const Model& model, const Tokenizer& tok, const SuiteOptions& o);

// The systems the gate checks: IMPRESS's and SPEC's, whose claim (accuracy
// kept at 25-50% retention) the project makes. The H2O baselines and car
// are measured and reported beside them, not gated (docs/accuracy.md: car
// loses needles at 0.25 on SmolLM2).
std::vector<engine::System> GatedSystems();

// The gate over a finished suite's results: {"tolerance", "systems",
// "checked" (system runs compared), "failures": [{"experiment",
// "workload", "value", "system", "score", "recompute"}], "passed"}. Runs
// without recompute or without generation tasks are not checked.
nlohmann::json AccuracyGate(const nlohmann::json& suite, double tolerance,
                            const std::vector<engine::System>& gated);

// `dir`/results.json when it holds a suite that has not finished (no
// "finished"); null when there is none or it finished (a new suite replaces
// it). A file that is not such JSON is an error naming it.
Result<nlohmann::json> ReadUnfinishedResults(const std::string& dir);

// The scratch directory name of one run (its tag, `experiment-workload` or
// `experiment-workload-setting`): characters other than letters, digits,
// '.', '_' and '-' become '_', so that a setting such as "2%/5%" or a
// workload file's stem is one path component.
std::string RunDirName(std::string_view tag);

// Reads a result of tools/llamacpp/runner.py bench; InvalidArgument naming
// the missing or mistyped field.
Result<nlohmann::json> ReadLlamaCppResults(const std::string& path);
// Files it under suite["llamacpp"][the workload's stem]: the report compares
// it with recompute and the reuse systems on that workload.
void AddLlamaCpp(const nlohmann::json& results, nlohmann::json* suite);

// One harness run as a Markdown table: per system TTFT mean/p50/p99 with
// its breakdown, disk bytes and chunks, device hit ratio, bytes per ideal,
// and with the quality pass top-1 agreement, KL and accuracy per task.
std::string HarnessTable(const nlohmann::json& run);

// Writes `dir`/results.json (every raw figure; replaced atomically),
// report.md (the tables) and, where gnuplot is installed, a PNG per figure
// (report.md says when not). An unfinished suite's report says how many
// runs it has.
Status WriteReport(const nlohmann::json& suite, const std::string& dir);

}  // namespace tierkv::bench

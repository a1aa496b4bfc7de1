// tierkv bench: the papers' experiments on request files, with a report.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "engine_flags.h"
#include "prompt_file.h"
#include "tierkv/tools/bench_suite.h"
#include "commands.h"

namespace tierkv::app {

namespace {

// The quick suite's accuracy gate: its retrieval workload (make_tasks.py
// ruler --size quick on SmolLM2) has 14 requests, so one lost answer moves
// a score by about 0.07; two may go before the gate fails (docs/accuracy.md).
constexpr double kQuickAccuracyGate = 0.15;

// The flags that decide a suite's results, as CLI11 writes them in a config
// file (every option with its value or default), without those that only
// say where results go or what is printed.
nlohmann::json FlagsIdentity(const CLI::App& sub) {
  static const char* const kNotResults[] = {"out", "fresh", "json", "llamacpp", "cache-dir", "accuracy-gate",
                                            "systems"};  // systems: in the settings, in canonical order
  nlohmann::json out = nlohmann::json::object();
  std::istringstream lines(sub.config_to_str(/*default_also=*/true, /*write_description=*/false));
  for (std::string line; std::getline(lines, line);) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    while (!key.empty() && key.back() == ' ') key.pop_back();
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    if (std::find(std::begin(kNotResults), std::end(kNotResults), key) == std::end(kNotResults)) out[key] = value;
  }
  return out;
}

}  // namespace

void AddBench(CLI::App& app, Action* run) {
  struct Args {
    EngineFlags f;
    std::string suite = "quick";
    std::vector<std::string> workloads;
    std::string out = "bench-results";
    double retention = 0.25;
    double device_share = 0.10, host_share = 0.30;
    int warmup = -1, rounds = -1;
    bool json = false, fresh = false, select_lowest = false;
    double accuracy_gate = -2;  // -2: the suite's default
    std::vector<std::string> llamacpp;
    std::vector<std::string> systems;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "bench",
      "The papers' experiments on request files (docs/bench.md): every system on the same requests and store, "
      "TTFT with its breakdown, bytes read, device hit ratio, fidelity and task accuracy against recompute; "
      "writes results.json, report.md and PNG plots to --out");
  sub->add_option("--suite", a->suite,
                  "quick (CI's: every system at retention --retention and at 1.0, minutes), systems (every system "
                  "on each workload) or paper (IMPRESS's Figures 16-24: ablation, pool policy, alpha, chunk "
                  "size, pool size, retention; hours on large workloads) or accuracy (every system at "
                  "retention 0.1, 0.25 and 0.5 whatever --retention says, task accuracy from the quality pass alone, no "
                  "timed rounds (--warmup and --rounds unused): RULER-style "
                  "generation tasks of make_tasks.py ruler, docs/accuracy.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"quick", "systems", "paper", "accuracy"}));
  sub->add_option("--workload", a->workloads,
                  "Request file (docs/workloads.md; tools/prompts/make_tasks.py writes them); repeat for several. "
                  "Experiments that vary a setting run on the first")
      ->required();
  sub->add_option("--out", a->out,
                  "Directory for results.json, report.md and the plots; results.json is rewritten after every run, "
                  "and a suite stopped before it finished resumes from it when run again with the same flags, "
                  "model and workload files")
      ->capture_default_str();
  sub->add_option("--systems", a->systems,
                  "Only these systems (comma-separated, e.g. recompute,impress,spec) of each experiment; "
                  "default: every system the suite runs. recompute's answers are computed whatever this says")
      ->delimiter(',');
  sub->add_flag("--fresh", a->fresh, "Start over: discard the unfinished results in --out instead of resuming");
  sub->add_option("--retention", a->retention, "Share of R's rows used by the selective systems")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--device-share", a->device_share, "Device pool as a share of the stored K/V bytes")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--host-share", a->host_share, "Host pool as a share of the stored K/V bytes")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--warmup", a->warmup, "Unmeasured passes per system and round (default: 1; quick: 0)")
      ->check(CLI::Range(0, 100));
  sub->add_option("--rounds", a->rounds, "Rounds over the systems in alternating order (default: 3; quick: 1)")
      ->check(CLI::Range(1, 100));
  sub->add_option("--llamacpp", a->llamacpp,
                  "Results of tools/llamacpp/runner.py bench on the same workloads (JSON; repeat for several): "
                  "the report puts llama.cpp's full prefill and state restore beside recompute and the reuse "
                  "systems");
  sub->add_option("--accuracy-gate", a->accuracy_gate,
                  "Fail (exit 3) when impress, its ablations or spec score on the generation tasks below "
                  "recompute's by more than this (0 to 1; default: 0.15 for --suite quick, none otherwise; "
                  "-1: none)")
      ->check(CLI::Range(-1.0, 1.0));
  sub->add_flag("--select-lowest", a->select_lowest,
                "Testing the gate: the selective systems keep their LEAST important rows, a deliberately "
                "wrong selection (the gate must fail); needs --accuracy-gate except with --suite quick");
  AddEngineFlags(sub, &a->f, ScratchStoreUse(/*pool_mib=*/false));
  sub->add_flag("--json", a->json, "Print results.json to stdout as well");
  sub->callback([a, run, sub] {
    *run = [a, sub]() -> int {
      if (!(a->retention > 0)) return Fail("--retention must be above 0");
      if (a->accuracy_gate > -2 && a->accuracy_gate != -1 && a->accuracy_gate < 0) {
        return Fail("--accuracy-gate must be -1 (none) or from 0 to 1");
      }
      const bool gate_given = a->accuracy_gate >= 0;
      if (a->select_lowest && !gate_given && a->suite != "quick") {
        return Fail("--select-lowest writes a deliberately wrong selection: give it with --accuracy-gate (or --suite quick)");
      }
      auto loaded = LoadModelAndTokenizer(a->f.model, a->f.tokenizer, a->f.weights);
      if (!loaded.ok()) return Fail(loaded.status().ToString());
      auto scratch = ScratchDir::Make(a->f.cache_dir, "bench");
      if (!scratch.ok()) return Fail(scratch.status().ToString());
      bench::SuiteOptions o;
      o.suite = *bench::ParseSuite(a->suite);  // checked by the flag
      const bool quick = o.suite == bench::Suite::kQuick;
      o.workloads = a->workloads;
      o.base = EngineOptionsFrom(a->f, scratch->path(), a->retention);
      o.retention = a->retention;
      o.device_share = a->device_share;
      o.host_share = a->host_share;
      o.warmup = a->warmup >= 0 ? a->warmup : (quick ? 0 : 1);
      o.rounds = a->rounds >= 1 ? a->rounds : (quick ? 1 : 3);
      o.accuracy_gate = a->accuracy_gate > -2 ? a->accuracy_gate : (quick ? kQuickAccuracyGate : -1);
      o.select_lowest = a->select_lowest;
      std::vector<engine::System> named;
      for (const std::string& name : a->systems) {
        auto s = engine::ParseSystem(name);
        if (!s.ok()) return Fail("--systems: " + s.status().message());
        named.push_back(*s);
      }
      // Once each, in the table's order: the same set is the same suite, however typed.
      for (engine::System s : engine::AllSystems()) {
        if (std::find(named.begin(), named.end(), s) != named.end()) o.systems.push_back(s);
      }
      if (o.accuracy_gate >= 0 && !o.systems.empty()) {
        const auto has = [&o](engine::System s) { return std::find(o.systems.begin(), o.systems.end(), s) != o.systems.end(); };
        const auto gated = bench::GatedSystems();
        if (!has(engine::System::kRecompute) || std::none_of(gated.begin(), gated.end(), has)) {
          return Fail("--systems leaves the accuracy gate nothing to check: it compares impress, impress-itf, "
                      "impress-ro or spec with recompute (add them, or give --accuracy-gate -1)");
        }
      }
      o.progress = StageProgressPrinter();
      // Read before the suite runs: a bad file fails in seconds, not hours.
      std::vector<nlohmann::json> llamacpp;
      for (const std::string& path : a->llamacpp) {
        auto j = bench::ReadLlamaCppResults(path);
        if (!j.ok()) return Fail(j.status().ToString());
        llamacpp.push_back(*j);
      }
      o.identity = FlagsIdentity(*sub);
      if (!a->fresh) {
        auto previous = bench::ReadUnfinishedResults(a->out);
        if (!previous.ok()) return Fail(previous.status().ToString());
        o.previous = std::move(*previous);
        if (!o.previous.is_null()) {
          std::fprintf(stderr, "bench: resuming the unfinished suite in %s/results.json (%zu runs kept)\n",
                       a->out.c_str(), static_cast<size_t>(o.previous.value("runs_done", 0)));
        }
      }
      o.checkpoint = [a, llamacpp](const nlohmann::json& partial) {
        nlohmann::json j = partial;
        for (const nlohmann::json& l : llamacpp) bench::AddLlamaCpp(l, &j);
        return bench::WriteReport(j, a->out);
      };
      auto suite = bench::RunSuite(*loaded->model, *loaded->tokenizer, o);
      if (!suite.ok()) return Fail(suite.status().ToString());
      for (const nlohmann::json& j : llamacpp) bench::AddLlamaCpp(j, &*suite);
      Status w = bench::WriteReport(*suite, a->out);
      if (!w.ok()) return Fail(w.ToString());
      if (a->json) std::printf("%s\n", suite->dump().c_str());
      std::fprintf(stderr, "bench: wrote %s/results.json and %s/report.md\n", a->out.c_str(), a->out.c_str());
      if (suite->contains("gate") && !(*suite)["gate"]["applicable"].get<bool>()) {
        std::fprintf(stderr, "bench: accuracy gate not applicable: no run had recompute and generation tasks\n");
        if (gate_given) return 3;  // asked for by name: checking nothing is not passing
      }
      if (suite->contains("gate") && !(*suite)["gate"]["passed"].get<bool>()) {
        for (const nlohmann::json& f : (*suite)["gate"]["failures"]) {
          std::fprintf(stderr, "bench: accuracy gate failed: %s on %s (%s %s): score %.3f, recompute %.3f, tolerance %.2f\n",
                       f["system"].get<std::string>().c_str(), f["workload"].get<std::string>().c_str(),
                       f["experiment"].get<std::string>().c_str(), f["value"].is_null() ? "" : f["value"].get<std::string>().c_str(),
                       f["score"].get<double>(), f["recompute"].get<double>(), o.accuracy_gate);
        }
        return 3;
      }
      return 0;
    };
  });
}

}  // namespace tierkv::app

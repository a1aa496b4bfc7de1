// The suites of tierkv bench (tierkv/tools/bench_suite.h): experiments as lists
// of harness runs.
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include <xxhash.h>

#include "tierkv/tools/bench_suite.h"
#include "tierkv/filesystem.h"
#include "tierkv/tools/harness.h"
#include "tierkv/tools/task_workload.h"
#include "tierkv/hex.h"

namespace tierkv::bench {

namespace {

using nlohmann::json;
using engine::System;

// One setting of an experiment's parameter: its label and what it changes.
struct Setting {
  std::string value;
  std::function<void(HarnessOptions&)> apply;
};

struct Experiment {
  std::string id, title;
  std::vector<System> systems;
  bool every_workload = false;  // else the first workload only
  bool quality = false;
  std::string param;               // what the settings vary ("" : one run)
  std::vector<Setting> settings;   // empty: one run as the suite sets it
  bool quality_only = false;       // no timed rounds: the quality pass alone
  // Systems the others are checked against (exact: as-like): under
  // SuiteOptions::systems, the experiment runs only if they are kept.
  std::vector<System> needs;
};

// `systems` without those `only` leaves out (empty `only`: all of them).
std::vector<System> Kept(std::vector<System> systems, const std::vector<System>& only) {
  if (only.empty()) return systems;
  std::erase_if(systems, [&only](System s) { return std::find(only.begin(), only.end(), s) == only.end(); });
  return systems;
}

Setting Retention(double r) {
  return {std::to_string(r).substr(0, 4), [r](HarnessOptions& h) { h.base.retention = r; }};
}

const std::vector<System> kPaperSystems = {System::kRecompute, System::kAsLike, System::kAsH2oLru, System::kAsH2oLfu,
                                           System::kImpress,   System::kSpec,   System::kCar};

Experiment SystemsExperiment(std::vector<System> systems) {
  return {"systems",
          "TTFT, load time and task accuracy per system and workload (IMPRESS Figures 16, 17; per-layer retention, "
          "Figure 19; spec's recall; tail latency)",
          std::move(systems), true, true, "", {}};
}

std::vector<Experiment> QuickSuite() {
  std::vector<System> all(engine::AllSystems().begin(), engine::AllSystems().end()), reusing;
  for (System s : all) {
    if (engine::TraitsOf(s).reuses) reusing.push_back(s);
  }
  Experiment exact{"exact",
           "Every reusing system at retention 1.0 against as-like (fp16-KV reuse): the logits must match exactly "
           "(prefixes stored in whole chunks, so that every system reuses the same rows)",
           reusing, false, true, "retention", {{"1.0", [](HarnessOptions& h) {
                                                  h.base.retention = 1.0;
                                                  h.whole_chunks = true;
                                                }}}};
  exact.needs = {System::kAsLike};
  return {SystemsExperiment(all), exact};
}

std::vector<Experiment> PaperSuite() {
  std::vector<Experiment> out = {SystemsExperiment(kPaperSystems)};
  // At the default pools the selective systems' working set fits in them
  // after the warm-up and they read nothing from disk in the measured rounds;
  // at 2% / 5% every system reads from disk in every round (#17 must-show 1).
  const Setting on_disk{"2%/5%", [](HarnessOptions& h) {
                          h.device_share = 0.02;
                          h.host_share = 0.05;
                        }};
  out.push_back({"disk",
                 "Prefix K/V mostly on disk: pools at 2% / 5% of the stored K/V, so that every system reads from "
                 "disk in every round",
                 {System::kAsLike, System::kAsH2oLru, System::kAsH2oLfu, System::kImpress, System::kSpec, System::kCar},
                 true, false, "pools", {on_disk}});
  // With the K/V on disk too: at the default pools the variants read
  // nothing after the warm-up and Figure 20's chunk counts are all zero.
  out.push_back({"ablation",
                 "Ablation with the K/V mostly on disk (pools 2% / 5%): H2O, + probe-head identification "
                 "(impress-itf), + reordering (impress-ro), + score pools (impress) (Figure 18); chunks read with and "
                 "without reordering (Figure 20)",
                 {System::kAsH2oLru, System::kImpressItf, System::kImpressRo, System::kImpress}, false, false, "pools",
                 {on_disk}});
  Experiment policy{"policy", "Pool policy: device hit ratio and TTFT of impress with score, LFU and LRU pools (Figure 21)",
                    {System::kImpress}, false, false, "policy", {}};
  for (engine::PoolPolicy p : {engine::PoolPolicy::kScore, engine::PoolPolicy::kLfu, engine::PoolPolicy::kLru}) {
    policy.settings.push_back({std::string(engine::PoolPolicyName(p)), [p](HarnessOptions& h) { h.base.policy = p; }});
  }
  out.push_back(policy);
  // The fixed alphas fall back as IMPRESS does (H2O over all keys), so the
  // figure shows its rule; auto runs at the defaults.
  Experiment alpha{"alpha", "The probe threshold: auto (fitted per layer) and IMPRESS's alpha from 0 to 2 with its H2O fallback (Figure 22)",
                   {System::kImpress}, false, true, "alpha", {{"auto", [](HarnessOptions& h) { h.base.alpha_auto = true; }}}};
  for (double a : {0.0, 0.5, 1.0, 1.5, 2.0}) {
    alpha.settings.push_back({std::to_string(a).substr(0, 3), [a](HarnessOptions& h) {
                                h.base.alpha_auto = false;
                                h.base.alpha = a;
                                h.base.fallback = engine::ProbeFallback::kH2o;
                              }});
  }
  out.push_back(alpha);
  Experiment chunk{"chunk", "Chunk size from 16 to 256 tokens (Figure 23)", {System::kAsLike, System::kImpress},
                   false, false, "chunk_tokens", {}};
  for (uint32_t c : {16u, 32u, 64u, 128u, 256u}) {
    chunk.settings.push_back({std::to_string(c), [c](HarnessOptions& h) { h.base.chunk_tokens = c; }});
  }
  out.push_back(chunk);
  Experiment pool{"pool", "Pools against the stored K/V: device and host pool shares (Figure 24)",
                  {System::kAsLike, System::kImpress}, false, false, "device_share", {}};
  for (double d : {0.02, 0.05, 0.10, 0.20, 0.40}) {
    pool.settings.push_back({std::to_string(d).substr(0, 4), [d](HarnessOptions& h) {
                               h.device_share = d;
                               h.host_share = std::min(1.0, 3 * d);
                             }});
  }
  out.push_back(pool);
  Experiment retention{"retention", "Retention against TTFT, fidelity and task accuracy",
                       {System::kAsH2oLru, System::kImpress, System::kSpec, System::kCar}, false, true, "retention", {}};
  for (double r : {0.1, 0.25, 0.5, 1.0}) retention.settings.push_back(Retention(r));
  out.push_back(retention);
  return out;
}

// Accuracy against retention, every system on every workload: the quality
// pass alone (each system from empty pools: its TTFT and disk reads are
// those of a first request on a prefix, or of a later one on a prefix an
// earlier request shared), at 0.1, 0.25 and 0.5. Generation tasks (RULER's needles
// and aggregation, make_tasks.py ruler) are scored on the greedy answer.
std::vector<Experiment> AccuracySuite() {
  Experiment e{"accuracy",
               "Task accuracy against retention per system (greedy answers of the generation tasks, "
               "log-likelihood choices of the multiple-choice ones), each system from empty pools",
               std::vector<System>(engine::AllSystems().begin(), engine::AllSystems().end()),
               true, true, "retention", {}};
  e.quality_only = true;
  for (double r : {0.1, 0.25, 0.5}) e.settings.push_back(Retention(r));
  return {e};
}

// The experiments restricted to `only` (SuiteOptions::systems; empty: as
// they are), dropping those left without a system or without what they
// are checked against (Experiment::needs).
Result<std::vector<Experiment>> OnlySystems(std::vector<Experiment> exps, const std::vector<System>& only,
                                            std::string_view suite) {
  if (only.empty()) return exps;
  std::vector<Experiment> kept;
  for (Experiment& e : exps) {
    e.systems = Kept(std::move(e.systems), only);
    if (!e.systems.empty() && Kept(e.needs, only).size() == e.needs.size()) kept.push_back(std::move(e));
  }
  if (kept.empty()) {
    return Status::InvalidArgument("systems: none of those given runs in the " + std::string(suite) + " suite");
  }
  return kept;
}

std::string Stem(const std::string& path) { return std::filesystem::path(path).stem().string(); }

json Machine() {
  json m;
  struct utsname u {};
  if (::uname(&u) == 0) m["kernel"] = std::string(u.sysname) + " " + u.release;
  m["cores"] = std::thread::hardware_concurrency();
  std::ifstream cpu("/proc/cpuinfo");
  for (std::string line; std::getline(cpu, line);) {
    if (line.rfind("model name", 0) == 0) {
      m["cpu"] = line.substr(line.find(':') + 2);
      break;
    }
  }
  return m;
}

std::string NowUtc() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// One run of an experiment on one workload, in its own store (removed after).
// `reference`: recompute's answers for these requests, shared by the runs on them.
using RunProgress = std::function<void(const std::string& what, size_t done, size_t total)>;

Result<json> RunOne(const Model& model, const Tokenizer& tok, const std::vector<TaskRequest>& reqs, const SuiteOptions& o,
                    const RunProgress& progress, const Experiment& e, const Setting* s, const std::string& tag,
                    std::shared_ptr<QualityReference> reference) {
  HarnessOptions h;
  h.systems = e.systems;
  h.base = o.base;
  h.base.retention = o.retention;
  h.base.cache_dir = o.base.cache_dir + "/" + RunDirName(tag);
  h.device_share = o.device_share;
  h.host_share = o.host_share;
  h.warmup = o.warmup;
  h.rounds = o.rounds;
  h.quality = e.quality;
  if (e.quality_only) h.rounds = h.warmup = 0;
  h.tokenizer = &tok;
  h.base.select_lowest = o.select_lowest;
  h.reference = std::move(reference);
  if (s) s->apply(h);
  if (progress) {
    h.progress = [&progress, tag](const std::string& what, size_t done, size_t total) {
      progress(tag + ": " + what, done, total);
    };
  }
  std::error_code ec;
  std::filesystem::remove_all(h.base.cache_dir, ec);
  auto r = RunHarness(model, reqs, h);
  std::filesystem::remove_all(h.base.cache_dir, ec);
  if (!r.ok()) return Status(r.status().code(), tag + ": " + r.status().message());
  return r;
}

// A request file, read once: its requests, recompute's answers for them
// (shared by the runs on it) and what identifies its bytes.
struct Workload {
  std::string name;  // the file's stem
  std::vector<TaskRequest> requests;
  std::shared_ptr<QualityReference> reference;
  json summary;  // results' "workloads" entry
  std::string digest;
};

Result<Workload> LoadWorkload(const std::string& path, const Tokenizer& tok, const Model& model) {
  Workload w;
  w.name = Stem(path);
  ASSIGN_OR_RETURN(w.requests, ReadTaskWorkload(path, tok, static_cast<size_t>(model.config().context_length)));
  ASSIGN_OR_RETURN(const std::string bytes, ReadFileToString(FileSystem::Default(), path));
  w.digest = Hex64(XXH3_64bits(bytes.data(), bytes.size()));
  size_t prefix = 0, choices = 0;
  for (const TaskRequest& r : w.requests) {
    prefix += r.prefix.size();
    choices += !r.choices.empty();
  }
  w.summary = {{"file", path}, {"requests", w.requests.size()}, {"with_choices", choices},
               {"prefix_tokens_mean", double(prefix) / double(w.requests.size())}};
  w.reference = NewQualityReference();
  return w;
}

// What must be equal for a kept run to belong to this suite.
json Identity(const json& out, const Model& model, const std::vector<Workload>& loads, const json& extra) {
  json id = {{"suite", out["suite"]}, {"settings", out["settings"]}, {"model", Hex64(model.content_hash())},
             {"flags", extra}};
  for (const Workload& w : loads) id["workloads"].push_back({{"name", w.name}, {"xxh3", w.digest}});
  return id;
}

// The path of the first field where `a` and `b` differ ("" when equal).
std::string FirstDifference(const json& a, const json& b, const std::string& at) {
  if (a.is_object() && b.is_object()) {
    for (const auto& [k, v] : a.items()) {
      if (!b.contains(k)) return at + "." + k;
      std::string d = FirstDifference(v, b[k], at + "." + k);
      if (!d.empty()) return d;
    }
    for (const auto& [k, v] : b.items()) {
      if (!a.contains(k)) return at + "." + k;
    }
    return "";
  }
  if (a.is_array() && b.is_array() && a.size() == b.size()) {
    for (size_t i = 0; i < a.size(); ++i) {
      std::string d = FirstDifference(a[i], b[i], at + "[" + std::to_string(i) + "]");
      if (!d.empty()) return d;
    }
    return "";
  }
  return a == b ? "" : at;
}

Status CheckResumable(const json& previous, const json& identity) {
  const std::string d = FirstDifference(previous["identity"], identity, "identity");
  if (d.empty()) return Status::Ok();
  return Status::InvalidArgument("the unfinished results in --out are of another suite: " + d +
                                 " differs (--fresh discards them and starts over)");
}

// A run of the unfinished results with this experiment, workload and
// setting; null when there is none.
json KeptRun(const json& previous, const std::string& id, const std::string& workload, const std::string& value) {
  if (previous.is_null()) return json();
  for (const json& e : previous["experiments"]) {
    if (!e.is_object() || e.value("id", "") != id || !e.contains("runs")) continue;
    for (const json& run : e["runs"]) {
      const json v = run.value("value", json());
      if (run.value("workload", "") == workload && (v.is_null() ? value.empty() : v == value) &&
          run.contains("result")) {
        return run;
      }
    }
  }
  return json();
}

// One run of the suite: an experiment, a workload and a setting (null: none).
struct Planned {
  size_t experiment, workload;
  const Setting* setting;
};

std::vector<Planned> Plan(const std::vector<Experiment>& exps, size_t workloads) {
  std::vector<Planned> out;
  for (size_t e = 0; e < exps.size(); ++e) {
    const size_t nw = exps[e].every_workload ? workloads : 1;
    for (size_t w = 0; w < nw; ++w) {
      if (exps[e].settings.empty()) out.push_back({e, w, nullptr});
      for (const Setting& s : exps[e].settings) out.push_back({e, w, &s});
    }
  }
  return out;
}

}  // namespace

std::string RunDirName(std::string_view tag) {
  std::string out(tag);
  for (char& ch : out) {
    const bool keep = std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-';
    if (!keep) ch = '_';
  }
  return out;
}

std::string_view SuiteName(Suite s) {
  switch (s) {
    case Suite::kQuick: return "quick";
    case Suite::kPaper: return "paper";
    case Suite::kSystems: return "systems";
    case Suite::kAccuracy: return "accuracy";
  }
  return "?";
}

Result<Suite> ParseSuite(std::string_view name) {
  for (Suite s : {Suite::kQuick, Suite::kPaper, Suite::kSystems, Suite::kAccuracy}) {
    if (name == SuiteName(s)) return s;
  }
  return Status::InvalidArgument("unknown suite '" + std::string(name) + "' (quick, paper, systems or accuracy)");
}

std::vector<System> GatedSystems() {
  return {System::kImpressItf, System::kImpressRo, System::kImpress, System::kSpec};
}

namespace {

// A system's overall generation score in a run's results, or null.
const json* AnswerScore(const json& sys) {
  if (!sys.is_object() || !sys.contains("quality")) return nullptr;
  const json& q = sys["quality"];
  if (!q.contains("answers") || !q["answers"].contains("score") || !q["answers"]["score"].is_number()) return nullptr;
  return &q["answers"]["score"];
}

}  // namespace

json AccuracyGate(const json& suite, double tolerance, const std::vector<System>& gated) {
  json failures = json::array();
  size_t checked = 0;
  for (const json& e : suite.value("experiments", json::array())) {
    for (const json& run : e.value("runs", json::array())) {
      if (!run.contains("result") || !run["result"].contains("systems")) continue;
      const json& systems = run["result"]["systems"];
      const json* ref = systems.contains("recompute") ? AnswerScore(systems["recompute"]) : nullptr;
      if (!ref) continue;  // no recompute or no generation tasks in this run
      const double floor = ref->get<double>() - tolerance;
      for (const auto& [name, sys] : systems.items()) {
        auto parsed = engine::ParseSystem(name);
        if (!parsed.ok() || std::find(gated.begin(), gated.end(), *parsed) == gated.end()) continue;
        const json* got = AnswerScore(sys);
        ++checked;
        if (!got || got->get<double>() < floor) {
          failures.push_back({{"experiment", e.value("id", "")}, {"workload", run.value("workload", "")},
                              {"value", run.value("value", json())}, {"system", name},
                              {"score", got ? *got : json()}, {"recompute", *ref}});
        }
      }
    }
  }
  json names = json::array();
  for (System g : gated) names.push_back(std::string(engine::SystemName(g)));
  // Nothing checked (no run had recompute and generation tasks): the gate
  // says so rather than passing; the caller decides what that means.
  return {{"tolerance", tolerance}, {"systems", names}, {"checked", checked}, {"applicable", checked > 0},
          {"failures", failures}, {"passed", failures.empty()}};
}

Result<json> RunSuite(const Model& model, const Tokenizer& tok, const SuiteOptions& o) {
  if (o.workloads.empty()) return Status::InvalidArgument("workloads: at least one request file");
  json out;
  out["suite"] = SuiteName(o.suite);
  out["started"] = NowUtc();
  out["machine"] = Machine();
  out["model"] = {{"layers", model.config().n_layers}, {"vocab", model.config().vocab_size}};
  out["settings"] = {{"retention", o.retention}, {"device_share", o.device_share}, {"host_share", o.host_share},
                     {"warmup", o.warmup}, {"rounds", o.rounds}};
  if (o.suite == Suite::kAccuracy) {
    // What the accuracy suite runs whatever the flags: its own retentions,
    // the quality pass alone.
    out["settings"] = {{"retentions", {0.1, 0.25, 0.5}}, {"rounds", 0}, {"warmup", 0},
                       {"device_share", o.device_share}, {"host_share", o.host_share}};
  }
  if (o.select_lowest) out["settings"]["select_lowest"] = true;
  if (!o.systems.empty()) {
    for (System s : o.systems) out["settings"]["systems"].push_back(std::string(engine::SystemName(s)));
  }
  std::vector<Workload> loads;
  for (const std::string& path : o.workloads) {
    ASSIGN_OR_RETURN(Workload w, LoadWorkload(path, tok, model));
    out["workloads"][w.name] = w.summary;
    loads.push_back(std::move(w));
  }
  out["identity"] = Identity(out, model, loads, o.identity);
  if (!o.previous.is_null()) {
    RETURN_IF_ERROR(CheckResumable(o.previous, out["identity"]));
    out["started"] = o.previous["started"];
    out["resumed"] = o.previous.value("resumed", json::array());
    out["resumed"].push_back(NowUtc());
  }
  ASSIGN_OR_RETURN(const std::vector<Experiment> exps,
                   OnlySystems(o.suite == Suite::kQuick      ? QuickSuite()
                               : o.suite == Suite::kPaper    ? PaperSuite()
                               : o.suite == Suite::kAccuracy ? AccuracySuite()
                                                             : std::vector<Experiment>{SystemsExperiment(kPaperSystems)},
                               o.systems, SuiteName(o.suite)));
  const std::vector<Planned> plan = Plan(exps, loads.size());
  out["runs_total"] = plan.size();
  out["runs_done"] = 0;
  out["experiments"] = json::array();
  for (const Experiment& e : exps) {
    out["experiments"].push_back({{"id", e.id}, {"title", e.title}, {"param", e.param}, {"runs", json::array()}});
  }
  for (size_t k = 0; k < plan.size(); ++k) {
    const Planned& p = plan[k];
    const Experiment& e = exps[p.experiment];
    const Workload& w = loads[p.workload];
    const std::string value = p.setting ? p.setting->value : "";
    json run = KeptRun(o.previous, e.id, w.name, value);
    if (run.is_null()) {
      const std::string tag = e.id + "-" + w.name + (p.setting ? "-" + value : "");
      RunProgress progress;
      if (o.progress) {
        progress = [&o, k, n = plan.size()](const std::string& what, size_t done, size_t total) {
          o.progress("run " + std::to_string(k + 1) + "/" + std::to_string(n) + " " + what, done, total);
        };
      }
      ASSIGN_OR_RETURN(json r, RunOne(model, tok, w.requests, o, progress, e, p.setting, tag, w.reference));
      run = {{"workload", w.name}, {"value", p.setting ? json(value) : json()}, {"result", std::move(r)},
             {"finished", NowUtc()}};
    } else if (o.progress) {
      o.progress("run " + std::to_string(k + 1) + "/" + std::to_string(plan.size()) + " kept from the unfinished results",
                 1, 1);
    }
    out["experiments"][p.experiment]["runs"].push_back(std::move(run));
    out["runs_done"] = k + 1;
    if (o.checkpoint && k + 1 < plan.size()) RETURN_IF_ERROR(o.checkpoint(out));
  }
  out["finished"] = NowUtc();
  if (o.accuracy_gate >= 0) out["gate"] = AccuracyGate(out, o.accuracy_gate, Kept(GatedSystems(), o.systems));
  return out;
}

Result<json> ReadUnfinishedResults(const std::string& dir) {
  const std::string path = dir + "/results.json";
  std::ifstream in(path);
  if (!in) return json();
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::InvalidArgument(path + ": not a JSON object (--fresh replaces it)");
  if (j.contains("finished")) return json();
  for (const char* key : {"identity", "experiments", "started"}) {
    if (!j.contains(key)) return Status::InvalidArgument(path + ": unfinished results without '" + key + "' (--fresh replaces it)");
  }
  if (!j["experiments"].is_array()) return Status::InvalidArgument(path + ": 'experiments' is not an array (--fresh replaces it)");
  return j;
}

}  // namespace tierkv::bench

// The suites of tierkv bench (tierkv/bench_suite.h): experiments as lists
// of harness runs.
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tierkv/bench_suite.h"
#include "tierkv/harness.h"
#include "tierkv/task_workload.h"

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
};

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
  return {SystemsExperiment(all),
          {"exact",
           "Every reusing system at retention 1.0 against as-like (fp16-KV reuse): the logits must match exactly "
           "(prefixes stored in whole chunks, so that every system reuses the same rows)",
           reusing, false, true, "retention", {{"1.0", [](HarnessOptions& h) {
                                                  h.base.retention = 1.0;
                                                  h.whole_chunks = true;
                                                }}}}};
}

std::vector<Experiment> PaperSuite() {
  std::vector<Experiment> out = {SystemsExperiment(kPaperSystems)};
  out.push_back({"ablation",
                 "Ablation: H2O, + probe-head identification (impress-itf), + reordering (impress-ro), + score pools "
                 "(impress) (Figure 18); chunks read with and without reordering (Figure 20)",
                 {System::kAsH2oLru, System::kImpressItf, System::kImpressRo, System::kImpress}, false, false, "", {}});
  Experiment policy{"policy", "Pool policy: device hit ratio and TTFT of impress with score, LFU and LRU pools (Figure 21)",
                    {System::kImpress}, false, false, "policy", {}};
  for (engine::PoolPolicy p : {engine::PoolPolicy::kScore, engine::PoolPolicy::kLfu, engine::PoolPolicy::kLru}) {
    policy.settings.push_back({std::string(engine::PoolPolicyName(p)), [p](HarnessOptions& h) { h.base.policy = p; }});
  }
  out.push_back(policy);
  Experiment alpha{"alpha", "The probe threshold: auto (fitted per layer) and IMPRESS's alpha from 0 to 2 (Figure 22)",
                   {System::kImpress}, false, true, "alpha", {{"auto", [](HarnessOptions& h) { h.base.alpha_auto = true; }}}};
  for (double a : {0.0, 0.5, 1.0, 1.5, 2.0}) {
    alpha.settings.push_back({std::to_string(a).substr(0, 3), [a](HarnessOptions& h) {
                                h.base.alpha_auto = false;
                                h.base.alpha = a;
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
Result<json> RunOne(const Model& model, const std::vector<TaskRequest>& reqs, const SuiteOptions& o,
                    const Experiment& e, const Setting* s, const std::string& tag,
                    std::shared_ptr<QualityReference> reference) {
  HarnessOptions h;
  h.systems = e.systems;
  h.base = o.base;
  h.base.retention = o.retention;
  h.base.cache_dir = o.base.cache_dir + "/" + tag;
  h.device_share = o.device_share;
  h.host_share = o.host_share;
  h.warmup = o.warmup;
  h.rounds = o.rounds;
  h.quality = e.quality;
  h.reference = std::move(reference);
  if (s) s->apply(h);
  if (o.progress) {
    h.progress = [&o, tag](const std::string& what, size_t done, size_t total) { o.progress(tag + ": " + what, done, total); };
  }
  std::error_code ec;
  std::filesystem::remove_all(h.base.cache_dir, ec);
  auto r = RunHarness(model, reqs, h);
  std::filesystem::remove_all(h.base.cache_dir, ec);
  if (!r.ok()) return Status(r.status().code(), tag + ": " + r.status().message());
  return r;
}

}  // namespace

std::string_view SuiteName(Suite s) {
  switch (s) {
    case Suite::kQuick: return "quick";
    case Suite::kPaper: return "paper";
    case Suite::kSystems: return "systems";
  }
  return "?";
}

Result<Suite> ParseSuite(std::string_view name) {
  for (Suite s : {Suite::kQuick, Suite::kPaper, Suite::kSystems}) {
    if (name == SuiteName(s)) return s;
  }
  return Status::InvalidArgument("unknown suite '" + std::string(name) + "' (quick, paper or systems)");
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
  std::vector<std::pair<std::string, std::vector<TaskRequest>>> loads;
  std::vector<std::shared_ptr<QualityReference>> references;  // per workload
  for (const std::string& path : o.workloads) {
    ASSIGN_OR_RETURN(auto reqs, ReadTaskWorkload(path, tok, static_cast<size_t>(model.config().context_length)));
    size_t prefix = 0, choices = 0;
    for (const TaskRequest& r : reqs) {
      prefix += r.prefix.size();
      choices += !r.choices.empty();
    }
    out["workloads"][Stem(path)] = {{"file", path}, {"requests", reqs.size()}, {"with_choices", choices},
                                    {"prefix_tokens_mean", double(prefix) / double(reqs.size())}};
    loads.emplace_back(Stem(path), std::move(reqs));
    references.push_back(NewQualityReference());
  }
  const std::vector<Experiment> exps = o.suite == Suite::kQuick  ? QuickSuite()
                                       : o.suite == Suite::kPaper ? PaperSuite()
                                                                  : std::vector<Experiment>{SystemsExperiment(kPaperSystems)};
  out["experiments"] = json::array();
  for (const Experiment& e : exps) {
    json ej = {{"id", e.id}, {"title", e.title}, {"param", e.param}, {"runs", json::array()}};
    const size_t nw = e.every_workload ? loads.size() : 1;
    for (size_t w = 0; w < nw; ++w) {
      const size_t ns = std::max<size_t>(1, e.settings.size());
      for (size_t i = 0; i < ns; ++i) {
        const Setting* s = e.settings.empty() ? nullptr : &e.settings[i];
        const std::string tag = e.id + "-" + loads[w].first + (s ? "-" + s->value : "");
        ASSIGN_OR_RETURN(json r, RunOne(model, loads[w].second, o, e, s, tag, references[w]));
        ej["runs"].push_back({{"workload", loads[w].first}, {"value", s ? json(s->value) : json()}, {"result", r}});
      }
    }
    out["experiments"].push_back(ej);
  }
  out["finished"] = NowUtc();
  return out;
}

}  // namespace tierkv::bench

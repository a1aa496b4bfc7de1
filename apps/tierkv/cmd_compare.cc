#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tierkv/engine.h"
#include "tierkv/tools/bench_suite.h"
#include "tierkv/tools/harness.h"
#include "tierkv/tools/task_workload.h"
#include "tierkv/tools/latency.h"
#include "tierkv/logging.h"
#include "engine_flags.h"
#include "prompt_file.h"
#include "commands.h"

namespace tierkv::app {

void AddCompare(CLI::App& app, Action* run) {
  struct Args {
    EngineFlags f;
    std::string prompt_file;
    std::vector<std::string> systems = {"as-like", "as-h2o-lfu", "impress", "spec"};
    double retention = 0.25;
    int repeat = 1;
    int warmup = 1;
    int rounds = 2;
    double device_share = 0.10, host_share = 0.30;
    double stored_share = 1.0;
    bool json = false;
    bool quality = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "compare",
      "TTFT of several systems on the same requests, in one process: stores the prefixes of a "
      "JSON Lines file ({\"prefix\": ..., \"query\": ...}), then runs each system on every "
      "prefix + query with device and host pools sized to a share of the stored K/V (most of "
      "it stays on disk, read with O_DIRECT)");
  sub->add_option("--systems", a->systems, "Systems to compare (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--retention", a->retention, "Share of R's rows used by the selective systems")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--repeat", a->repeat, "Passes over the requests per system")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  sub->add_option("--warmup", a->warmup,
                  "Unmeasured passes per system first (pools warm up, impress reports "
                  "importance); then one maintenance round (impress, impress-ro, spec: KV "
                  "reordering)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  sub->add_option("--rounds", a->rounds,
                  "Rounds over the systems, in the listed order, then reversed, and so on; each "
                  "round opens every system afresh. Whichever system runs first after the "
                  "prefixes are written reads a disk that is still settling, and later ones "
                  "find more of it in the host's cache: alternating the order evens that out")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  sub->add_option("--device-share", a->device_share,
                  "Device pool as a share of the stored K/V bytes")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--host-share", a->host_share, "Host pool as a share of the stored K/V bytes")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--stored-share", a->stored_share,
                  "Share of each prefix stored before the systems run (the rest, NR, is computed "
                  "by every request, with the query)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  AddPromptFileFlag(sub, &a->prompt_file);
  AddEngineFlags(sub, &a->f, ScratchStoreUse(/*pool_mib=*/false));
  sub->add_flag("--json", a->json, "Print one JSON object");
  sub->add_flag("--quality", a->quality,
                "After the rounds, serve every request once more with each system and with "
                "recompute: top-1 agreement and KL against recompute, and task accuracy for "
                "requests with choices (docs/workloads.md)");
  sub->callback([a, run] {
    *run = [a]() -> int {
      bench::HarnessOptions h;
      for (const std::string& name : a->systems) {
        auto s = engine::ParseSystem(name);
        if (!s.ok()) return Fail("--systems: " + s.status().message());
        h.systems.push_back(*s);
      }
      if (!(a->retention > 0)) return Fail("--retention must be above 0");
      auto loaded = LoadModelAndTokenizer(a->f.model, a->f.tokenizer, a->f.weights);
      if (!loaded.ok()) return Fail(loaded.status().ToString());
      const Model& model = *loaded->model;
      auto reqs = bench::ReadTaskWorkload(a->prompt_file, *loaded->tokenizer,
                                  static_cast<size_t>(model.config().context_length));
      if (!reqs.ok()) return Fail(reqs.status().ToString());
      auto scratch = ScratchDir::Make(a->f.cache_dir, "compare");
      if (!scratch.ok()) return Fail(scratch.status().ToString());
      h.base = EngineOptionsFrom(a->f, scratch->path(), a->retention);
      h.device_share = a->device_share;
      h.host_share = a->host_share;
      h.stored_share = a->stored_share;
      h.warmup = a->warmup;
      h.rounds = a->rounds;
      h.repeat = a->repeat;
      h.quality = a->quality;
      auto result = bench::RunHarness(model, *reqs, h);
      if (!result.ok()) return Fail(result.status().ToString());
      const nlohmann::json& out = *result;
      if (a->json) {
        std::printf("%s\n", out.dump().c_str());
      } else {
        const double stored = out["stored_bytes"].get<double>();
        std::printf("%zu requests x %d x %d rounds, retention %.2f, stored K/V %.1f MB, device pool %.1f MB, "
                    "host pool %.1f MB\n\n%s",
                    reqs->size(), a->repeat, a->rounds, a->retention, stored / 1e6,
                    a->device_share * stored / 1e6, a->host_share * stored / 1e6,
                    bench::HarnessTable(out).c_str());
      }
      return 0;
    };
  });
}

}  // namespace tierkv::app

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
#include "tierkv/latency.h"
#include "tierkv/logging.h"
#include "prompt_file.h"
#include "tierkv/commands.h"

namespace tierkv::app {

void AddCompare(CLI::App& app, Action* run) {
  struct Args {
    EngineFlags f;
    std::vector<std::string> systems = {"as-like", "as-h2o-lfu", "impress", "spec"};
    double retention = 0.25;
    int repeat = 1;
    int warmup = 1;
    int rounds = 2;
    double device_share = 0.10, host_share = 0.30;
    double stored_share = 1.0;
    bool json = false;
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
  AddEngineFlags(sub, &a->f);
  sub->add_flag("--json", a->json, "Print one JSON object");
  sub->callback([a, run] {
    *run = [a]() -> int {
      std::vector<engine::System> systems;
      for (const std::string& name : a->systems) {
        auto s = engine::ParseSystem(name);
        if (!s.ok()) return Fail("--systems: " + s.status().message());
        systems.push_back(*s);
      }
      if (!(a->retention > 0)) return Fail("--retention must be above 0");
      auto loaded = LoadModelAndTokenizer(a->f.model, a->f.tokenizer);
      if (!loaded.ok()) return Fail(loaded.status().ToString());
      const Model& model = *loaded->model;
      auto reqs = ReadPromptFile(a->f.prompt_file, *loaded->tokenizer,
                                  static_cast<size_t>(model.config().context_length));
      if (!reqs.ok()) return Fail(reqs.status().ToString());
      auto scratch = ScratchDir::Make(a->f.cache_dir, "compare");
      if (!scratch.ok()) return Fail(scratch.status().ToString());
      const engine::EngineOptions base = EngineOptionsFrom(a->f, scratch->path(), a->retention);
      uint64_t stored = 0;
      {
        engine::EngineOptions w = base;
        w.system = engine::System::kAsLike;
        // Exact rows (as-like stores what it computed over all of R), with
        // the importance-ordered copy when --store-order asks for one
        // (system or on): every system reads this one store.
        if (w.store_order == engine::StoreOrder::kSystem) w.store_order = engine::StoreOrder::kOn;
        auto writer = engine::Engine::Open(model, w);
        if (!writer.ok()) return Fail(writer.status().ToString());
        for (const PromptPair& r : *reqs) {
          const size_t n = std::max<size_t>(
              1, static_cast<size_t>(a->stored_share * static_cast<double>(r.prefix.size())));
          auto s = (*writer)->Serve(std::span(r.prefix).first(std::min(n, r.prefix.size())));
          if (!s.ok()) return Fail("storing a prefix: " + s.status().ToString());
        }
        stored = (*writer)->StoredBytes();
        // One unmeasured pass reading every stored record: otherwise the
        // first system measured reads a disk still busy with what was just
        // written (measured: about 25% slower than the same system run
        // second), and only it finds nothing in the host's cache.
        engine::ServeOptions so;
        so.store = false;
        for (const PromptPair& r : *reqs) {
          auto s = (*writer)->Serve(r.Joined(), so);
          if (!s.ok()) return Fail("reading the stored prefixes once: " + s.status().ToString());
        }
      }
      nlohmann::json out;
      out["requests"] = reqs->size();
      out["repeat"] = a->repeat;
      out["rounds"] = a->rounds;
      out["warmup"] = a->warmup;
      out["retention"] = a->retention;
      out["stored_share"] = a->stored_share;
      out["stored_bytes"] = stored;
      out["device_bytes"] = static_cast<uint64_t>(a->device_share * stored);
      out["host_bytes"] = static_cast<uint64_t>(a->host_share * stored);
      // What one system measured, summed over rounds.
      struct Acc {
        std::vector<double> ttft, layer_wait, layer_recall, round_ttft;
        std::vector<int> recall_n;
        double wait = 0, identify = 0, compute = 0;
        uint64_t bytes = 0, chunks = 0, dev = 0, host = 0, disk = 0, dev_bytes = 0, host_bytes = 0;
        uint64_t reordered = 0;
        uint64_t maintain_errors = 0;  // reordering rounds that failed (skipped)
        std::vector<engine::ProbeFit> probe_fits;  // alpha auto
        double ideal_bytes = 0;  // what the rows used would take, read exactly (RequestStats)
        std::vector<double> fallback;  // per layer: requests whose probes fell back
      };
      std::vector<Acc> acc(systems.size());
      auto measure = [&](size_t si, int round) -> Status {
        const engine::System sys = systems[si];
        Acc& A = acc[si];
        engine::EngineOptions o = base;
        o.system = sys;
        o.device_bytes = static_cast<uint64_t>(a->device_share * stored);
        o.host_bytes = static_cast<uint64_t>(a->host_share * stored);
        ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> eng, engine::Engine::Open(model, o));
        if (round == 0 && eng->UsesProfile() && (engine::TraitsOf(sys).profiled || eng->ProbeFits().empty())) {
          // Profiling prompts, unmeasured: car's once per system; the probe
          // profile once (systems sharing it, and later rounds' engines,
          // open with the saved one).
          RETURN_IF_ERROR(eng->Profile(ProfilingPrompts(*reqs)).status());
        }
        if (A.probe_fits.empty()) A.probe_fits = eng->ProbeFits();
        engine::ServeOptions so;
        so.store = false;  // every system sees the same store
        for (int pass = 0; pass < a->warmup; ++pass) {
          for (const PromptPair& r : *reqs) RETURN_IF_ERROR(eng->Serve(r.Joined(), so).status());
        }
        // Reordering is an optimisation: a round that fails (a full disk)
        // leaves the store as it was, and the system runs without it.
        auto maint = eng->Maintain();
        if (maint.ok()) {
          A.reordered += maint->reordered_runs;
        } else {
          ++A.maintain_errors;
          TIERKV_LOG(kWarn) << engine::SystemName(sys) << ": maintenance skipped: "
                            << maint.status().ToString();
        }
        double round_sum = 0;
        size_t round_n = 0;
        for (int pass = 0; pass < a->repeat; ++pass) {
          for (const PromptPair& r : *reqs) {
            ASSIGN_OR_RETURN(engine::ServeResult s, eng->Serve(r.Joined(), so));
            A.ttft.push_back(s.stats.ttft_ms);
            round_sum += s.stats.ttft_ms;
            ++round_n;
            const auto& L = s.stats.layers;
            A.ideal_bytes += static_cast<double>(s.stats.ideal_bytes);
            A.fallback.resize(L.size(), 0.0);
            for (size_t l = 0; l < L.size(); ++l) A.fallback[l] += L[l].fallback;
            A.layer_wait.resize(L.size(), 0.0);
            A.layer_recall.resize(L.size(), 0.0);
            A.recall_n.resize(L.size(), 0);
            for (size_t l = 0; l < L.size(); ++l) {
              A.layer_wait[l] += L[l].wait_ms;
              if (L[l].recall >= 0) {
                A.layer_recall[l] += L[l].recall;
                A.recall_n[l]++;
              }
            }
            A.wait += s.stats.load_wait_ms;
            A.identify += s.stats.identify_ms;
            A.compute += s.stats.compute_ms;
            A.bytes += s.stats.disk_bytes_read;
            A.dev_bytes += s.stats.device_bytes_read;
            A.host_bytes += s.stats.host_bytes_read;
            A.chunks += s.stats.disk_chunks_read;
            A.dev += s.stats.device_hits;
            A.host += s.stats.host_hits;
            A.disk += s.stats.disk_reads;
          }
        }
        A.round_ttft.push_back(round_sum / static_cast<double>(round_n));
        return Status::Ok();
      };
      for (int round = 0; round < a->rounds; ++round) {
        for (size_t i = 0; i < systems.size(); ++i) {
          const size_t si = round % 2 == 0 ? i : systems.size() - 1 - i;
          Status s = measure(si, round);
          if (!s.ok()) return Fail(std::string(engine::SystemName(systems[si])) + ": " + s.ToString());
        }
      }
      nlohmann::json per = nlohmann::json::object();
      for (size_t si = 0; si < systems.size(); ++si) {
        const Acc& A = acc[si];
        const double n = static_cast<double>(A.ttft.size());
        double mean = 0;
        for (double t : A.ttft) mean += t;
        mean /= n;
        nlohmann::json j;
        j["ttft_ms_mean"] = mean;
        j["ttft_ms_p99"] = bench::Percentile(A.ttft, 0.99);
        j["ttft_ms_mean_by_round"] = A.round_ttft;
        j["load_wait_ms_mean"] = A.wait / n;
        j["identify_ms_mean"] = A.identify / n;
        j["compute_ms_mean"] = A.compute / n;
        // Bytes and chunks: per round (rounds read about the same).
        const uint64_t passes = static_cast<uint64_t>(a->rounds);
        j["disk_bytes_read"] = A.bytes / passes;
        j["disk_chunks_read"] = A.chunks / passes;
        j["device_bytes_read"] = A.dev_bytes / passes;
        j["host_bytes_read"] = A.host_bytes / passes;
        // Chunk-layer accesses through the pools: a selective system's
        // access is a device hit when the pool had every row it needed.
        j["device_hit_ratio"] =
            A.dev + A.host + A.disk ? static_cast<double>(A.dev) / (A.dev + A.host + A.disk) : 0.0;
        j["reordered_runs"] = A.reordered / passes;
        j["maintain_errors"] = A.maintain_errors;
        // Per layer: the mean load wait (spec's should shrink against
        // impress's where its prediction was right) and spec's recall.
        nlohmann::json lw = nlohmann::json::array(), lr = nlohmann::json::array();
        for (size_t l = 0; l < A.layer_wait.size(); ++l) {
          lw.push_back(A.layer_wait[l] / n);
          lr.push_back(A.recall_n[l] ? nlohmann::json(A.layer_recall[l] / A.recall_n[l])
                                     : nlohmann::json());
        }
        j["layer_load_wait_ms"] = lw;
        // Bytes read from disk per byte the used rows need (ideal_bytes); with
        // pools that hit, below 1 says little: run with zero pools to see
        // the read path's own amplification.
        j["ideal_bytes"] = A.ideal_bytes / passes;
        j["disk_bytes_per_ideal"] = A.ideal_bytes > 0 ? static_cast<double>(A.bytes) / A.ideal_bytes : 0.0;
        nlohmann::json fb = nlohmann::json::array();
        for (double f : A.fallback) fb.push_back(f / n);
        j["layer_fallback_share"] = fb;
        if (!A.probe_fits.empty()) j["probe_fit"] = ProbeFitJson(A.probe_fits);
        if (engine::TraitsOf(systems[si]).speculates) j["layer_recall"] = lr;
        per[std::string(engine::SystemName(systems[si]))] = j;
      }
      out["systems"] = per;
      if (a->json) {
        std::printf("%s\n", out.dump().c_str());
      } else {
        std::printf("%zu requests x %d x %d rounds, retention %.2f, stored K/V %.1f MB, device pool %.1f MB, "
                    "host pool %.1f MB\n\n",
                    reqs->size(), a->repeat, a->rounds, a->retention, stored / 1e6,
                    a->device_share * stored / 1e6, a->host_share * stored / 1e6);
        std::printf("| system | TTFT mean ms | p99 ms | load wait ms | disk MB read | disk chunks read | device hit ratio |\n");
        std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
        for (const auto& [name, j] : per.items()) {
          std::printf("| %s | %.1f | %.1f | %.1f | %.1f | %llu | %.3f |\n", name.c_str(),
                      j["ttft_ms_mean"].get<double>(), j["ttft_ms_p99"].get<double>(),
                      j["load_wait_ms_mean"].get<double>(),
                      j["disk_bytes_read"].get<uint64_t>() / 1e6,
                      static_cast<unsigned long long>(j["disk_chunks_read"].get<uint64_t>()),
                      j["device_hit_ratio"].get<double>());
        }
      }
      return 0;
    };
  });
}

}  // namespace tierkv::app

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "store/chunk_store.h"
#include "prompt_file.h"
#include "tierkv/commands.h"

namespace tierkv::app {
namespace {

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(std::ceil(p * v.size())) - 1);
  return v[i];
}

}  // namespace

void AddCompare(CLI::App& app, Action* run) {
  struct Args {
    EngineFlags f;
    std::vector<std::string> systems = {"as-like", "as-h2o-lfu", "impress", "spec"};
    double retention = 0.25;
    int repeat = 1;
    int warmup = 1;
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
        if (!engine::Implemented(*s)) return Fail("--systems: " + name + " is not implemented yet");
        systems.push_back(*s);
      }
      if (!(a->retention > 0)) return Fail("--retention must be above 0");
      auto loaded = LoadModelAndTokenizer(a->f.model, a->f.tokenizer);
      if (!loaded.ok()) return Fail(loaded.status().ToString());
      const Model& model = *loaded->model;
      auto reqs = ReadPromptFile(a->f.prompt_file, *loaded->tokenizer);
      if (!reqs.ok()) return Fail(reqs.status().ToString());
      auto scratch = ScratchDir::Make(a->f.cache_dir, "compare");
      if (!scratch.ok()) return Fail(scratch.status().ToString());
      const engine::EngineOptions base = EngineOptionsFrom(a->f, scratch->path(), a->retention);
      uint64_t stored = 0;
      {
        engine::EngineOptions w = base;
        w.system = engine::System::kAsLike;
        auto writer = engine::Engine::Open(model, w);
        if (!writer.ok()) return Fail(writer.status().ToString());
        for (const PromptPair& r : *reqs) {
          const size_t n = std::max<size_t>(
              1, static_cast<size_t>(a->stored_share * static_cast<double>(r.prefix.size())));
          auto s = (*writer)->Serve(std::span(r.prefix).first(std::min(n, r.prefix.size())));
          if (!s.ok()) return Fail("storing a prefix: " + s.status().ToString());
        }
        stored = (*writer)->TEST_store()->stats().live_bytes;
      }
      nlohmann::json out;
      out["requests"] = reqs->size();
      out["repeat"] = a->repeat;
      out["retention"] = a->retention;
      out["stored_share"] = a->stored_share;
      out["stored_bytes"] = stored;
      out["device_bytes"] = static_cast<uint64_t>(a->device_share * stored);
      out["host_bytes"] = static_cast<uint64_t>(a->host_share * stored);
      nlohmann::json per = nlohmann::json::object();
      for (engine::System sys : systems) {
        engine::EngineOptions o = base;
        o.system = sys;
        o.device_bytes = static_cast<uint64_t>(a->device_share * stored);
        o.host_bytes = static_cast<uint64_t>(a->host_share * stored);
        auto eng = engine::Engine::Open(model, o);
        if (!eng.ok()) return Fail(eng.status().ToString());
        if (sys == engine::System::kCar) {
          // CaR's profiling prompts: the file's first prefixes, unmeasured.
          std::vector<std::vector<int32_t>> profiling;
          for (size_t i = 0; i < std::min<size_t>(8, reqs->size()); ++i) {
            profiling.push_back((*reqs)[i].prefix);
          }
          auto p = (*eng)->Profile(profiling);
          if (!p.ok()) return Fail("car: " + p.status().ToString());
        }
        for (int pass = 0; pass < a->warmup; ++pass) {
          for (const PromptPair& r : *reqs) {
            engine::ServeOptions so;
            so.store = false;
            auto s = (*eng)->Serve(r.Joined(), so);
            if (!s.ok()) return Fail(std::string(engine::SystemName(sys)) + ": " + s.status().ToString());
          }
        }
        auto maint = (*eng)->Maintain();
        if (!maint.ok()) return Fail(maint.status().ToString());
        std::vector<double> ttft;
        std::vector<double> layer_wait, layer_recall;
        std::vector<int> recall_n;
        double wait = 0, identify = 0, compute = 0;
        uint64_t bytes = 0, chunks = 0, dev = 0, host = 0, disk = 0, dev_bytes = 0, host_bytes = 0;
        for (int pass = 0; pass < a->repeat; ++pass) {
          for (const PromptPair& r : *reqs) {
            engine::ServeOptions so;
            so.store = false;  // every system sees the same store
            auto s = (*eng)->Serve(r.Joined(), so);
            if (!s.ok()) return Fail(std::string(engine::SystemName(sys)) + ": " + s.status().ToString());
            ttft.push_back(s->stats.ttft_ms);
            const auto& L = s->stats.layers;
            layer_wait.resize(L.size(), 0.0);
            layer_recall.resize(L.size(), 0.0);
            recall_n.resize(L.size(), 0);
            for (size_t l = 0; l < L.size(); ++l) {
              layer_wait[l] += L[l].wait_ms;
              if (L[l].recall >= 0) {
                layer_recall[l] += L[l].recall;
                recall_n[l]++;
              }
            }
            wait += s->stats.load_wait_ms;
            identify += s->stats.identify_ms;
            compute += s->stats.compute_ms;
            bytes += s->stats.disk_bytes_read;
            dev_bytes += s->stats.device_bytes_read;
            host_bytes += s->stats.host_bytes_read;
            chunks += s->stats.disk_chunks_read;
            dev += s->stats.device_hits;
            host += s->stats.host_hits;
            disk += s->stats.disk_reads;
          }
        }
        double mean = 0;
        for (double t : ttft) mean += t;
        mean /= static_cast<double>(ttft.size());
        nlohmann::json j;
        j["ttft_ms_mean"] = mean;
        j["ttft_ms_p99"] = Percentile(ttft, 0.99);
        j["load_wait_ms_mean"] = wait / static_cast<double>(ttft.size());
        j["identify_ms_mean"] = identify / static_cast<double>(ttft.size());
        j["compute_ms_mean"] = compute / static_cast<double>(ttft.size());
        j["disk_bytes_read"] = bytes;
        j["disk_chunks_read"] = chunks;
        j["device_bytes_read"] = dev_bytes;
        j["host_bytes_read"] = host_bytes;
        // Chunk-layer accesses through the pools: a selective system's
        // access is a device hit when the pool had every row it needed.
        j["device_hit_ratio"] = dev + host + disk ? static_cast<double>(dev) / (dev + host + disk) : 0.0;
        j["reordered_runs"] = maint->reordered_runs;
        // Per layer: the mean load wait (spec's should shrink against
        // impress's where its prediction was right) and spec's recall.
        nlohmann::json lw = nlohmann::json::array(), lr = nlohmann::json::array();
        for (size_t l = 0; l < layer_wait.size(); ++l) {
          lw.push_back(layer_wait[l] / static_cast<double>(ttft.size()));
          lr.push_back(recall_n[l] ? nlohmann::json(layer_recall[l] / recall_n[l]) : nlohmann::json());
        }
        j["layer_load_wait_ms"] = lw;
        if (sys == engine::System::kSpec) j["layer_recall"] = lr;
        per[std::string(engine::SystemName(sys))] = j;
      }
      out["systems"] = per;
      if (a->json) {
        std::printf("%s\n", out.dump().c_str());
      } else {
        std::printf("%zu requests x %d, retention %.2f, stored K/V %.1f MB, device pool %.1f MB, "
                    "host pool %.1f MB\n\n",
                    reqs->size(), a->repeat, a->retention, stored / 1e6,
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

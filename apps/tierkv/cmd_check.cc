#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tierkv/engine.h"
#include "tierkv/fidelity.h"
#include "tierkv/tools/harness.h"
#include "tierkv/tools/task_workload.h"
#include "engine_flags.h"
#include "prompt_file.h"
#include "commands.h"

namespace tierkv::app {
void AddCheck(CLI::App& app, Action* run) {
  struct Args {
    EngineFlags f;
    std::string prompt_file;
    std::string system = "as-like";
    double retention = 1.0;
    bool json = false;
    bool from_remote = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "check",
      "Fidelity of a system against recompute: stores each prefix of a JSON Lines file "
      "({\"prefix\": ..., \"query\": ...}) through a normal request, then serves prefix + query "
      "with the system from cold pools and compares the query tokens' next-token "
      "distributions with recompute's");
  sub->add_option("--system", a->system,
                  "The system to check: recompute, as-like, as-h2o-lru, as-h2o-lfu, impress, impress-itf, "
                  "impress-ro, spec or car")
      ->capture_default_str();
  sub->add_option("--retention", a->retention, "Share of the stored prefix's rows used per layer")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  AddPromptFileFlag(sub, &a->prompt_file);
  AddEngineFlags(sub, &a->f, ScratchStoreUse(/*pool_mib=*/true));
  sub->add_flag("--from-remote", a->from_remote,
                "With --remote: the system gets the stored prefixes only from the remote tier: they are "
                "stored in a directory of their own and every chunk is sent up (in the writer's importance "
                "order with --store-order), and the system starts from an empty directory (with the "
                "profiles measured by the writer)");
  sub->add_flag("--json", a->json, "Print one JSON object");
  sub->callback([a, run] {
    *run = [a]() -> int {
      auto system = engine::ParseSystem(a->system);
      if (!system.ok()) return Fail("--system: " + system.status().message());
      if (!(a->retention > 0)) return Fail("--retention must be above 0");
      auto loaded = LoadModelAndTokenizer(a->f.model, a->f.tokenizer, a->f.weights);
      if (!loaded.ok()) return Fail(loaded.status().ToString());
      const Model& model = *loaded->model;
      auto prompts = bench::ReadTaskWorkload(a->prompt_file, *loaded->tokenizer,
                                  static_cast<size_t>(model.config().context_length));
      if (!prompts.ok()) return Fail(prompts.status().ToString());

      auto scratch = ScratchDir::Make(a->f.cache_dir, "check");
      if (!scratch.ok()) return Fail(scratch.status().ToString());
      engine::EngineOptions eo = EngineOptionsFrom(a->f, scratch->path(), a->retention);
      eo.system = *system;
      const bool reuse = engine::TraitsOf(*system).reuses;
      size_t not_stored = 0;  // prefixes whose storing failed (a full disk): less reuse, said below
      engine::EngineOptions wo = eo;  // the writer's
      if (a->from_remote) {
        if (a->f.engine.remote.url.empty()) return Fail("--from-remote needs --remote URL");
        wo.cache_dir = scratch->path() + "/writer";
        eo.cache_dir = scratch->path() + "/reader";
        wo.remote.admit = RemoteAdmit::kAlways;
        // Private (0700) as the store makes its directories: it holds prompts.
        if (Status st = FileSystem::Default()->CreateDir(eo.cache_dir); !st.ok()) {
          return Fail("--from-remote: " + st.ToString());
        }
      }
      if (reuse) {
        // Store every prefix through a normal request.
        auto writer = engine::Engine::Open(model, wo);
        if (!writer.ok()) return Fail(writer.status().ToString());
        if ((*writer)->UsesProfile()) {
          // car's sparsity, the fitted probe thresholds: measured on the
          // file's first prefixes and saved, so the engine below uses them.
          auto p = (*writer)->Profile(bench::ProfilingPrompts(*prompts));
          if (!p.ok()) return Fail("profiling: " + p.status().ToString());
        }
        for (const bench::TaskRequest& p : *prompts) {
          auto r = (*writer)->Serve(p.prefix);
          if (!r.ok()) return Fail("storing a prefix: " + r.status().ToString());
          not_stored += r->stats.store_failed;
        }
        (*writer)->DrainRemote();  // every chunk is up before the system reads
      }
      if (a->from_remote && reuse) {
        // The profiles the writer measured, beside the reader's store.
        for (const auto& e : std::filesystem::directory_iterator(wo.cache_dir)) {
          if (e.path().extension() != ".json") continue;
          std::error_code ec;
          std::filesystem::copy_file(e.path(), eo.cache_dir + "/" + e.path().filename().string(),
                                     std::filesystem::copy_options::overwrite_existing, ec);
          if (ec) return Fail("--from-remote: copying " + e.path().string() + ": " + ec.message());
        }
      }
      engine::EngineOptions ro;
      ro.system = engine::System::kRecompute;
      auto reference = engine::Engine::Open(model, ro);
      if (!reference.ok()) return Fail(reference.status().ToString());
      // A new engine: its pools are cold, every reused chunk comes from disk.
      auto sys = engine::Engine::Open(model, eo);
      if (!sys.ok()) return Fail(sys.status().ToString());

      engine::Fidelity fid;
      const int L = model.config().n_layers;
      std::vector<double> rows(L, 0), reused(L, 0), fallbacks(L, 0), recall(L, 0), recalls(L, 0);
      uint64_t reused_tokens = 0, prefix_tokens = 0, remote_bytes = 0;
      for (const bench::TaskRequest& p : *prompts) {
        const std::vector<int32_t> tokens = p.Joined();
        engine::ServeOptions so;
        so.logits_from = p.prefix.size();
        so.store = false;
        auto ref = (*reference)->Serve(tokens, so);
        if (!ref.ok()) return Fail(ref.status().ToString());
        auto got = (*sys)->Serve(tokens, so);
        if (!got.ok()) return Fail(got.status().ToString());
        fid.Add(ref->logits, got->logits, static_cast<size_t>(model.config().vocab_size));
        reused_tokens += got->stats.reused_tokens;
        remote_bytes += got->stats.remote_bytes;
        prefix_tokens += p.prefix.size();
        for (int l = 0; l < L && l < static_cast<int>(got->stats.layers.size()); ++l) {
          rows[l] += static_cast<double>(got->stats.layers[l].rows);
          reused[l] += static_cast<double>(got->stats.reused_tokens);
          fallbacks[l] += got->stats.layers[l].fallback ? 1 : 0;
          if (got->stats.layers[l].recall >= 0) {
            recall[l] += got->stats.layers[l].recall;
            recalls[l] += 1;
          }
        }
      }
      if (a->json) {
        nlohmann::json j;
        j["system"] = a->system;
        j["retention"] = a->retention;
        j["requests"] = prompts->size();
        j["query_tokens"] = fid.rows;
        j["prefix_tokens"] = prefix_tokens;
        j["reused_tokens"] = reused_tokens;
        j["prefixes_not_stored"] = not_stored;
        if (!a->f.engine.remote.url.empty()) j["remote_bytes"] = remote_bytes;
        j["max_abs_logit_diff"] = fid.max_abs_logit_diff;
        j["top1_agree"] = fid.top1_agree();
        j["kl_mean"] = fid.kl_mean();
        nlohmann::json layers = nlohmann::json::array();
        for (int l = 0; l < L; ++l) {
          nlohmann::json e;
          e["layer"] = l;
          e["retention"] = reused[l] > 0 ? rows[l] / reused[l] : 1.0;
          e["fallback_share"] = fallbacks[l] / static_cast<double>(prompts->size());
          if (recalls[l] > 0) {
            e["recall"] = recall[l] / recalls[l];  // spec: of the set this layer used
          } else {
            e["recall"] = nullptr;
          }
          layers.push_back(e);
        }
        j["layers"] = layers;
        if (!(*sys)->ProbeFits().empty()) j["probe_fit"] = bench::ProbeFitJson((*sys)->ProbeFits());
        std::printf("%s\n", j.dump().c_str());
      } else {
        std::printf("system %s, retention %.2f: %zu requests, %zu query tokens, %llu of %llu "
                    "prefix tokens reused\n",
                    a->system.c_str(), a->retention, prompts->size(), fid.rows,
                    static_cast<unsigned long long>(reused_tokens),
                    static_cast<unsigned long long>(prefix_tokens));
        std::printf("max |dlogit| %.4g, top-1 agreement %.4f, mean KL %.4g (against recompute)\n",
                    fid.max_abs_logit_diff, fid.top1_agree(), fid.kl_mean());
        if (!a->f.engine.remote.url.empty()) {
          std::printf("%llu bytes fetched from the remote tier\n", static_cast<unsigned long long>(remote_bytes));
        }
        if (not_stored > 0) {
          std::printf("%zu prefixes could not be stored (see the warnings): less was reused\n",
                      not_stored);
        }
      }
      return 0;
    };
  });
}

}  // namespace tierkv::app

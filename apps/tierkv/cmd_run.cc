#include <cstdio>

#include "commands.h"
#include "tierkv/chat.h"
#include "tierkv/engine.h"
#include "tierkv/generate.h"
#include "engine_flags.h"

namespace tierkv::app {

namespace {

struct RunArgs {
  EngineFlags f;  // the model, and with --cache-dir the store and the engine
  std::string prompt, kv_dtype = "f32";
  int max_tokens = 64;
  float temperature = 0.8f, top_p = 0.9f;
  uint64_t seed = 0;
  bool stats = false, chat = false;
  std::string system = "as-like";
  double retention = 1.0;
};

// The prompt through the engine (stored prefix reused, the prompt stored for
// later runs), then decoding over the rows the prompt attended.
Result<GenerateResult> GenerateWithReuse(const Model& model, const Tokenizer& tok, const RunArgs& a,
                                         std::vector<int32_t> prompt_tokens, const GenerateOptions& go) {
  RETURN_IF_ERROR(ValidateGenerateOptions(go));
  auto system = engine::ParseSystem(a.system);
  if (!system.ok()) return system.status().WithContext("--system");
  DiskBudget budget;
  engine::EngineOptions o = EngineOptionsFrom(a.f, a.f.cache_dir, a.retention, &budget);
  o.system = *system;
  if (a.stats) {
    std::fprintf(stderr, "disk budget %.1f MiB (%s)\n", double(budget.bytes) / double(1u << 20), budget.how.c_str());
  }
  ASSIGN_OR_RETURN(auto eng, engine::Engine::Open(model, o));
  GenerateResult res;
  res.prompt_tokens = std::move(prompt_tokens);
  engine::ServeOptions so;
  so.keep_kv = true;
  ASSIGN_OR_RETURN(engine::ServeResult first, eng->Serve(res.prompt_tokens, so));
  const engine::RequestStats& st = first.stats;
  res.prefill_ms = st.ttft_ms;
  if (a.stats) {
    std::fprintf(stderr, "%s: %zu of %zu prompt tokens reused (%llu bytes read from disk), TTFT %.1f ms\n",
                 a.system.c_str(), st.reused_tokens, st.prompt_tokens,
                 static_cast<unsigned long long>(st.disk_bytes_read), st.ttft_ms);
    if (!a.f.engine.remote.url.empty()) {
      std::fprintf(stderr, "remote: %llu chunks whole, %llu in part (%llu bytes) fetched in %.1f ms\n",
                   static_cast<unsigned long long>(st.remote_chunks),
                   static_cast<unsigned long long>(st.remote_important_chunks),
                   static_cast<unsigned long long>(st.remote_bytes), st.remote_ms);
    }
  }
  Sequence& seq = *first.sequence;
  const auto step = [&](int32_t t) { return seq.Step(model, t); };
  RETURN_IF_ERROR(Continue(tok, model.config().context_length, std::move(first.logits), step, go, &res));
  eng->DrainRemote();  // the chunks queued for the remote tier go up before the process ends
  if (a.stats && !a.f.engine.remote.url.empty()) {
    const RemoteStats rs = eng->RemoteStatistics();
    std::fprintf(stderr,
                 "remote: %llu chunks written (%llu bytes), %llu refused by Redis, %llu dropped, %llu errors, "
                 "%llu corrupt\n",
                 static_cast<unsigned long long>(rs.uploads), static_cast<unsigned long long>(rs.bytes_up),
                 static_cast<unsigned long long>(rs.upload_refusals),
                 static_cast<unsigned long long>(rs.dropped_writes),
                 static_cast<unsigned long long>(rs.errors_total()),
                 static_cast<unsigned long long>(rs.corrupt));
  }
  return res;
}

// --prompt as it is (BOS first where the vocabulary adds one), or with
// --chat as the user's message in the model's chat template.
Result<std::vector<int32_t>> PromptTokens(const Model& model, const Tokenizer& tok, const RunArgs& a) {
  if (!a.chat) return tok.Encode(a.prompt, /*add_bos=*/true);
  ASSIGN_OR_RETURN(const ChatTemplate t, ChooseChatTemplate(model.embedded_vocab(), "auto"));
  const ChatMessage m{"user", a.prompt};
  return ChatPromptTokens(tok, t, std::span<const ChatMessage>(&m, 1));
}

}  // namespace

void AddRun(CLI::App& app, Action* run) {
  using Args = RunArgs;
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("run", "Generate a continuation of a prompt");
  auto store_flags = AddEngineFlags(sub, &a->f,
                 EngineFlagUse{"Reuse and store the prompt's K/V in this cache directory (created if "
                               "missing): a later run whose prompt starts the same reuses that prefix, and "
                               "the tokens generated attend the rows the prompt attended. Without it the "
                               "prompt is computed in memory and nothing is kept (the store's, selection's "
                               "and remote tier's flags are then refused)"});
  sub->add_option("--prompt", a->prompt, "Prompt text")->required();
  sub->add_option("--max-tokens", a->max_tokens, "Tokens to generate at most")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--temperature", a->temperature, "Sampling temperature; 0 is greedy")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--top-p", a->top_p, "Nucleus sampling mass in (0, 1]")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 1.0f));
  sub->add_option("--seed", a->seed, "Random seed for sampling")->capture_default_str();
  sub->add_option("--kv-dtype", a->kv_dtype,
                  "KV cache element type (with --cache-dir the store's: f16)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "f16"}));
  sub->add_flag("--stats", a->stats, "Print token counts and timings to stderr");
  sub->add_flag("--chat", a->chat, "The prompt is a user's message, in the model's chat template");
  store_flags.push_back(sub->add_option("--system", a->system,
                                        "With --cache-dir: how the stored prefix is reused (tierkv compare's "
                                        "systems: as-like reads all of it, as fp16 rows; the selective ones read a "
                                        "share)")
                            ->capture_default_str());
  store_flags.push_back(sub->add_option("--retention", a->retention,
                                        "With --cache-dir: share of the prefix rows a selective system reads per "
                                        "layer")
                            ->capture_default_str()
                            ->check(CLI::Range(0.0, 1.0)));
  sub->callback([a, run, store_flags] {
    *run = [a, store_flags]() -> int {
      if (a->f.cache_dir.empty()) {
        if (Status s = CheckStoreFlagsUnused(store_flags); !s.ok()) return Fail(s.message());
      }
      auto loaded = LoadModelAndTokenizer(a->f.model, a->f.tokenizer, a->f.weights);
      if (!loaded.ok()) return Fail(loaded.status().ToString());
      const Model& model = *loaded->model;
      const Tokenizer& tok = *loaded->tokenizer;
      GenerateOptions go;
      go.max_tokens = a->max_tokens;
      go.sampler.temperature = a->temperature;
      go.sampler.top_p = a->top_p;
      go.sampler.seed = a->seed;
      go.kv_dtype = a->kv_dtype == "f16" ? KvDType::kF16 : KvDType::kF32;
      go.on_text = [](std::string_view s) {
        std::fwrite(s.data(), 1, s.size(), stdout);
        std::fflush(stdout);
      };
      auto tokens = PromptTokens(model, tok, *a);
      if (!tokens.ok()) return Fail(tokens.status().ToString());
      auto res = a->f.cache_dir.empty() ? Generate(model, tok, std::move(*tokens), go)
                                      : GenerateWithReuse(model, tok, *a, std::move(*tokens), go);
      if (!res.ok()) return Fail(res.status().ToString());
      std::fputc('\n', stdout);
      std::fflush(stdout);  // before --stats' lines on stderr
      if (res->hit_context_limit) {
        std::fprintf(stderr, "tierkv: stopped at the model's context limit (%d tokens)\n",
                     model.config().context_length);
      }
      if (a->stats) {
        std::fprintf(stderr,
                     "prompt tokens: %zu, generated: %zu, prefill %.1f ms, decode %.1f ms "
                     "(%.1f tokens/s)\n",
                     res->prompt_tokens.size(), res->output_tokens.size(), res->prefill_ms,
                     res->decode_ms,
                     res->decode_ms > 0 ? 1000.0 * res->output_tokens.size() / res->decode_ms : 0);
      }
      return 0;
    };
  });
}

}  // namespace tierkv::app

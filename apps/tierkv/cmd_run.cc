#include <cstdio>

#include "tierkv/commands.h"
#include "tierkv/generate.h"

namespace tierkv::app {

void AddRun(CLI::App& app, Action* run) {
  struct Args {
    std::string model, tokenizer, prompt, kv_dtype = "f32";
    int max_tokens = 64;
    float temperature = 0.8f, top_p = 0.9f;
    uint64_t seed = 0;
    bool stats = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("run", "Generate a continuation of a prompt");
  sub->add_option("--model", a->model,
                  "Model file: GGUF (llama) or llama2.c checkpoint (default: $TIERKV_MODEL, else " +
                      DefaultModelPath() + ")");
  sub->add_option("--tokenizer", a->tokenizer,
                  "SentencePiece .model or llama2.c tokenizer.bin (default: the model's own)");
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
  sub->add_option("--kv-dtype", a->kv_dtype, "KV cache element type")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "f16"}));
  sub->add_flag("--stats", a->stats, "Print token counts and timings to stderr");
  sub->callback([a, run] {
    *run = [a]() -> int {
      auto loaded = LoadModelAndTokenizer(a->model, a->tokenizer);
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
      auto res = Generate(model, tok, a->prompt, go);
      if (!res.ok()) return Fail(res.status().ToString());
      std::fputc('\n', stdout);
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

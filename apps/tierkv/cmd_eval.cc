#include <cstdio>
#include <fstream>
#include <sstream>

#include "commands.h"
#include "tierkv/eval.h"
#include "tierkv/tokenizer.h"

namespace tierkv::app {

void AddEval(CLI::App& app, Action* run) {
  struct Args {
    std::string model, tokenizer, text;
    WeightFlags weights;
    int window = 0;
    int64_t max_tokens = 0;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* eval = app.add_subcommand("eval", "Evaluate a model");
  eval->require_subcommand(1);
  CLI::App* sub = eval->add_subcommand(
      "ppl", "Perplexity on a text file: consecutive windows, each predicting its own tokens");
  sub->add_option("--model", a->model,
                  "Model file (GGUF or llama2.c) or a pulled model's name (default: $TIERKV_MODEL, else " +
                      DefaultModelPath() + ")");
  sub->add_option("--tokenizer", a->tokenizer,
                  "SentencePiece .model, a GGUF file's tokenizer or llama2.c tokenizer.bin (default: the model's own)");
  AddWeightsFlag(sub, &a->weights);
  sub->add_option("--text", a->text, "UTF-8 text file")->required()->check(CLI::ExistingFile);
  sub->add_option("--window", a->window, "Tokens per window (default: the model's context)")
      ->check(CLI::Range(2, 1 << 20));
  sub->add_option("--max-tokens", a->max_tokens, "Score at most this many tokens (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--json", a->json, "Print one JSON object");
  sub->callback([a, run] {
    *run = [a]() -> int {
      auto loaded = LoadModelAndTokenizer(a->model, a->tokenizer, a->weights);
      if (!loaded.ok()) return Fail(loaded.status().ToString());
      const Model& model = *loaded->model;
      const Tokenizer& tok = *loaded->tokenizer;
      std::ifstream in(a->text, std::ios::binary);
      std::ostringstream ss;
      ss << in.rdbuf();
      if (!in) return Fail("cannot read " + a->text);
      auto ids = tok.Encode(ss.str(), /*add_bos=*/false);
      if (!ids.ok()) return Fail(ids.status().ToString());
      if (a->max_tokens > 0 && static_cast<int64_t>(ids->size()) > a->max_tokens) {
        ids->resize(static_cast<size_t>(a->max_tokens));
      }
      const int window = a->window > 0 ? a->window : model.config().context_length;
      auto r = EvaluatePerplexity(model, *ids, window, ProgressPrinter("windows"));
      if (!r.ok()) return Fail(r.status().ToString());
      if (a->json) {
        std::printf(
            "{\"tokens_scored\": %lld, \"windows\": %d, \"window\": %d, \"mean_nll\": %.6f, "
            "\"perplexity\": %.4f}\n",
            static_cast<long long>(r->tokens_scored), r->windows, window, r->mean_nll,
            r->perplexity);
      } else {
        std::printf("tokens scored: %lld in %d windows of %d\nmean NLL: %.4f nats\nperplexity: %.3f\n",
                    static_cast<long long>(r->tokens_scored), r->windows, window, r->mean_nll,
                    r->perplexity);
      }
      return 0;
    };
  });
}

}  // namespace tierkv::app

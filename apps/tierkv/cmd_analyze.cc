#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tierkv/tools/plot.h"
#include "tierkv/tools/attention_study.h"
#include "tierkv/engine.h"
#include "tierkv/tools/needle_study.h"
#include "tierkv/tools/task_workload.h"
#include "commands.h"
#include "engine_flags.h"
#include "tierkv/filesystem.h"
#include "tierkv/tokenizer.h"

namespace tierkv::app {
namespace {

std::string BaseName(const std::string& path) {
  std::string b = path.substr(path.find_last_of('/') + 1);
  return b.substr(0, b.find('.'));
}

// One PNG with the six measures per layer and the random baselines, if
// gnuplot is installed; returns what happened.
std::string Plot(const std::string& dat, const std::string& png, const std::string& title) {
  const std::string gp = dat + ".gp";
  std::ofstream s(gp);
  s << "set terminal pngcairo noenhanced size 1000,560\nset output '" << png << "'\n"
    << "set title '" << title << "'\nset xlabel 'layer'\nset xtics 1\nset yrange [0:1]\n"
    << "set key outside right\nset grid\n"
    << "plot '" << dat << "' u 1:2 w lp t 'top-10% mass', '' u 1:3 w lp t 'heads J@10%', "
    << "'' u 1:4 w lp t 'heads J@40%', '' u 1:5 w lp t 'next layer J@25%', "
    << "'' u 1:6 w lp t 'probe vs all J@25%', '' u 1:7 w lp t 'probe vs heads J@25%', "
    << "0.0526 dt 2 lc 'gray' t 'random J@10%', 0.25 dt 3 lc 'gray' t 'random J@40%', "
    << "0.1429 dt 4 lc 'gray' t 'random J@25%'\n";
  s.close();
  return bench::RunGnuplot(gp, png);
}

// tierkv analyze needles: where selection keeps or drops the needles of a
// generation workload (make_tasks.py ruler), layer by layer.
void AddNeedles(CLI::App* analyze, Action* run) {
  struct Args {
    std::string model, tokenizer, workload, out;
    WeightFlags weights;
    bench::NeedleStudyOptions study;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = analyze->add_subcommand(
      "needles",
      "Where a needle is lost: for each request of a generation workload whose expected strings are each in its "
      "prefix exactly once (make_tasks.py ruler's needles), the needle tokens' rank in the query's attention importance per layer, and "
      "whether the shared set (per token, in 64-token blocks) and each head's own set keep them at each retention");
  sub->add_option("--model", a->model,
                  "Model file or a pulled model's name (default: $TIERKV_MODEL, else " + DefaultModelPath() + ")");
  sub->add_option("--tokenizer", a->tokenizer, "Tokenizer (default: the model's own)");
  AddWeightsFlag(sub, &a->weights);
  sub->add_option("--workload", a->workload, "Request file with answers (docs/workloads.md)")->required();
  sub->add_option("--retention", a->study.retentions, "Retentions to check (repeat; default 0.1, 0.25, 0.5)")
      ->check(CLI::Range(1e-6, 1.0));
  sub->add_option("--block-tokens", a->study.block_tokens,
                  "Tokens per selection unit of the 'block' column (the engine's auto unit: 64-token blocks, "
                  "down to a 4 KiB page's rows on short prefixes)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  AddParsedOption(sub, "--score-pool", &a->study.score_pool, engine::ParseScorePool,
                  "Max-pool each head's scores first, as the engine's --score-pool: B rows before and A "
                  "after (B:A), N on either side (N), or off",
                  "off, N or B:A")
      ->default_str(engine::ScorePoolName(a->study.score_pool));
  sub->add_option("--out", a->out, "Write the Markdown report to this file too");
  sub->callback([a, run] {
    *run = [a]() -> int {
      auto loaded = LoadModelAndTokenizer(a->model, a->tokenizer, a->weights);
      if (!loaded.ok()) return Fail(loaded.status().ToString());
      auto reqs = bench::ReadTaskWorkload(a->workload, *loaded->tokenizer,
                                          static_cast<size_t>(loaded->model->config().context_length));
      if (!reqs.ok()) return Fail(reqs.status().ToString());
      auto s = bench::RunNeedleStudy(*loaded->model, *loaded->tokenizer, *reqs, a->study, ProgressPrinter("requests"));
      if (!s.ok()) return Fail(s.status().ToString());
      const std::string md = bench::NeedleStudyToMarkdown(*s);
      std::fputs(md.c_str(), stdout);
      if (!a->out.empty()) {
        Status st = WriteFileAtomically(FileSystem::Default(), a->out, md);
        if (!st.ok()) return Fail(st.ToString());
      }
      return 0;
    };
  });
}

}  // namespace

void AddAnalyze(CLI::App& app, Action* run) {
  struct Args {
    std::string model, tokenizer, out, name;
    WeightFlags weights;
    std::vector<std::string> texts;
    bench::AttentionStudyOptions study;
  };
  auto a = std::make_shared<Args>();
  CLI::App* analyze = app.add_subcommand("analyze", "Study a model's behaviour");
  analyze->require_subcommand(1);
  CLI::App* sub = analyze->add_subcommand(
      "attention",
      "Where attention goes: top-10% mass, cross-head and cross-layer Jaccard of top-k key sets, "
      "probe heads vs all heads (IMPRESS Fig. 8, SPEC Obs. III)");
  sub->add_option("--model", a->model,
                  "Model file or a pulled model's name (default: $TIERKV_MODEL, else " +
                      DefaultModelPath() + ")");
  sub->add_option("--tokenizer", a->tokenizer, "Tokenizer (default: the model's own)");
  AddWeightsFlag(sub, &a->weights);
  sub->add_option("--text", a->texts,
                  "Text file(s) the prompts are cut from (default: the corpora in " +
                      std::string(TIERKV_SHARED_DIR) + "/data/corpus, if present)")
      ->check(CLI::ExistingFile);
  sub->add_option("--prompts", a->study.prompts, "Number of prompts")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--min-tokens", a->study.min_tokens,
                  "Prompt length in tokens (capped by the model's context)")
      ->capture_default_str()
      ->check(CLI::Range(32, 1 << 20));
  sub->add_option("--query-tokens", a->study.query_tokens,
                  "Rows at the end of each prompt whose attention is summed")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--probe-heads", a->study.probe_heads, "Probe heads (the first N KV heads)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--out", a->out,
                  "Directory for attention-NAME.md, .dat and .png (default: print only)");
  sub->add_option("--name", a->name, "NAME in the output files (default: the model's file name)");
  sub->callback([a, run] {
    *run = [a]() -> int {
      auto loaded = LoadModelAndTokenizer(a->model, a->tokenizer, a->weights);
      if (!loaded.ok()) return Fail(loaded.status().ToString());
      const Model& model = *loaded->model;
      const Tokenizer& tok = *loaded->tokenizer;
      if (a->texts.empty()) {
        for (const char* f : {"/data/corpus/austen.txt", "/data/corpus/jargon.txt"}) {
          const std::string path = std::string(TIERKV_SHARED_DIR) + f;
          if (FileSystem::Default()->FileExists(path)) a->texts.push_back(path);
        }
        if (a->texts.empty()) return Fail("no --text given and no corpus in " TIERKV_SHARED_DIR);
      }
      std::vector<int32_t> corpus;
      for (const auto& path : a->texts) {
        auto text = ReadFileToString(FileSystem::Default(), path);
        if (!text.ok()) return Fail(text.status().ToString());
        auto ids = tok.Encode(*text, false);
        if (!ids.ok()) return Fail(ids.status().ToString());
        corpus.insert(corpus.end(), ids->begin(), ids->end());
      }
      const std::string name = a->name.empty() ? BaseName(loaded->path) : a->name;
      auto s = bench::RunAttentionStudy(model, name, corpus, tok.bos_id(), a->study,
                                        ProgressPrinter("prompts"));
      if (!s.ok()) return Fail(s.status().ToString());
      const std::string md = bench::StudyToMarkdown(*s);
      std::fputs(md.c_str(), stdout);
      if (!a->out.empty()) {
        Status st = FileSystem::Default()->CreateDir(a->out);
        const std::string base = a->out + "/attention-" + name;
        if (st.ok()) st = WriteFileAtomically(FileSystem::Default(), base + ".md", md);
        if (st.ok()) st = WriteFileAtomically(FileSystem::Default(), base + ".dat", bench::StudyToTable(*s));
        if (!st.ok()) return Fail(st.ToString());
        std::fprintf(stderr, "wrote %s.md and %s.dat; %s\n", base.c_str(), base.c_str(),
                     Plot(base + ".dat", base + ".png",
                          name + ": " + std::to_string(s->prompts) + " prompts of " +
                              std::to_string(s->prompt_tokens) + " tokens").c_str());
      }
      return 0;
    };
  });
  AddNeedles(analyze, run);
}

}  // namespace tierkv::app

// Subcommands of the tierkv tool. Each Add* registers its flags on the app and
// sets *run to the action to take when the subcommand is chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "tierkv/model.h"
#include "tierkv/status.h"
#include "tierkv/tokenizer.h"

namespace tierkv::app {

using Action = std::function<int()>;

void AddRun(CLI::App& app, Action* run);
void AddConvert(CLI::App& app, Action* run);
void AddQuantize(CLI::App& app, Action* run);
void AddInfo(CLI::App& app, Action* run);
void AddBenchEngine(CLI::App& app, Action* run);
void AddEval(CLI::App& app, Action* run);
void AddAnalyze(CLI::App& app, Action* run);
void AddBenchIo(CLI::App& app, Action* run);
void AddSimCache(CLI::App& app, Action* run);
void AddBenchIndex(CLI::App& app, Action* run);
void AddInspect(CLI::App& app, Action* run);
void AddVerify(CLI::App& app, Action* run);
void AddCheck(CLI::App& app, Action* run);
void AddCompare(CLI::App& app, Action* run);
void AddServe(CLI::App& app, Action* run);
void AddBenchServe(CLI::App& app, Action* run);
void AddBench(CLI::App& app, Action* run);
void AddPull(CLI::App& app, Action* run);

// Prints "tierkv: error: <message>" to stderr and returns the exit code 1.
int Fail(const std::string& message);

// The model to use when --model is not given: $TIERKV_MODEL, else the
// project's own default model (models/tierkv-default.gguf in the source tree).
std::string DefaultModelPath();
// `flag` if set, else DefaultModelPath(), a pulled model's name resolved
// to its file (tierkv/model_packages.h); fails with a clear message if the
// default is missing or a named model is not pulled.
Result<std::string> ModelPathOrDefault(const std::string& flag);

// The flags of how a model's weights are held and multiplied.
struct WeightFlags {
  std::string storage = "auto";  // --weights (tierkv/model.h WeightStorage)
  std::string crossover;         // --crossover FILE; empty: the built-in figures
};

struct ModelAndTokenizer {
  std::string path;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};
// The model (--model or the default) and its tokenizer (--tokenizer or the
// model's own), with the errors the user should see.
Result<ModelAndTokenizer> LoadModelAndTokenizer(const std::string& model_flag,
                                                const std::string& tokenizer_flag,
                                                const WeightFlags& weights = {});
// A check that a flag's value is not empty (`--crossover ""` is a mistake,
// not "no file").
CLI::Validator NonEmpty();
// --weights and --crossover, for every subcommand that loads a model.
void AddWeightsFlag(CLI::App* sub, WeightFlags* weights);
// --crossover applied to the process (tierkv/model.h UseCrossoverFile).
Status ApplyCrossoverFlag(const WeightFlags& weights);
// The model at `path` held as --weights says, --crossover applied first.
Result<std::unique_ptr<Model>> LoadModel(const std::string& path, const WeightFlags& weights);

// A progress callback (done, total) for long work: a line rewritten in place
// on a terminal, else a line per tenth of the work.
std::function<void(int, int)> ProgressPrinter(const std::string& unit);
// The same for work in stages: (stage, done, total), each stage counted on
// its own (the line is redrawn with the stage's name).
std::function<void(const std::string&, size_t, size_t)> StageProgressPrinter();

}  // namespace tierkv::app

// tierkv: the command-line tool. Each subcommand lives in its own cmd_*.cc.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "signals.h"
#include "commands.h"
#include "tierkv/logging.h"
#include "tierkv/model_packages.h"

namespace tierkv::app {

int Fail(const std::string& message) {
  std::fprintf(stderr, "tierkv: error: %s\n", message.c_str());
  return 1;
}

std::string DefaultModelPath() {
  if (const char* env = std::getenv("TIERKV_MODEL"); env && *env) return env;
  return TIERKV_DEFAULT_MODEL;
}

Result<std::string> ModelPathOrDefault(const std::string& flag) {
  if (!flag.empty()) return ResolveModelFlag(flag);
  ASSIGN_OR_RETURN(const std::string path, ResolveModelFlag(DefaultModelPath()));
  if (::access(path.c_str(), R_OK) != 0) {
    return Status::NotFound("no --model given and the default model " + path +
                            " is not there (set TIERKV_MODEL or pass --model)");
  }
  return path;
}

CLI::Validator NonEmpty() {
  return CLI::Validator([](std::string& s) { return s.empty() ? std::string("must not be empty") : std::string(); },
                        "");
}

void AddWeightsFlag(CLI::App* sub, WeightFlags* weights) {
  sub->add_option("--weights", weights->storage,
                  "How the weight matrices are held: 'fp32' (dequantized at load, 4 bytes a weight), "
                  "'mapped' (in the file's own types, from its memory mapping, the rows that products read copied into "
                  "huge pages at load where the kernel has them: products of a few "
                  "rows, as in decode, multiply in that type against 8-bit activations, longer ones dequantize "
                  "a tile at a time for sgemm; on CPUs with AVX-512 VNNI, Q4_K and Q8_0 tensors are repacked "
                  "at load and multiply in type at any length; resident about the file's size), 'auto': fp32 "
                  "when the "
                  "weights take at most 1 GiB in fp32, mapped above (docs/models.md). llama2.c files are fp32")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "fp32", "mapped"}));
  sub->add_option("--crossover", weights->crossover,
                  "Products of up to N activation rows (decode, short batches) multiply in the weights' own type, "
                  "longer ones dequantize for sgemm: N per type as measured on this machine and saved in FILE by "
                  "`tierkv bench-engine --calibrate FILE` (a file from another CPU is refused). Without "
                  "it, the figures built in for this kind of CPU (docs/engine.md). Weights held in fp32 (--weights "
                  "fp32, or auto on a small model) always multiply by sgemm: the file changes nothing there")
      ->type_name("FILE")
      ->check(NonEmpty());
}

Status ApplyCrossoverFlag(const WeightFlags& weights) {
  if (weights.crossover.empty()) return Status::Ok();
  return UseCrossoverFile(weights.crossover);
}

Result<std::unique_ptr<Model>> LoadModel(const std::string& path, const WeightFlags& weights) {
  RETURN_IF_ERROR(ApplyCrossoverFlag(weights));
  ModelLoadOptions o;
  ASSIGN_OR_RETURN(o.weights, ParseWeightStorage(weights.storage));
  ASSIGN_OR_RETURN(const std::string file, ResolveModelFlag(path));
  return Model::Load(file, o);
}

Result<ModelAndTokenizer> LoadModelAndTokenizer(const std::string& model_flag,
                                                const std::string& tokenizer_flag,
                                                const WeightFlags& weights) {
  ModelAndTokenizer m;
  ASSIGN_OR_RETURN(m.path, ModelPathOrDefault(model_flag));
  ASSIGN_OR_RETURN(m.model, LoadModel(m.path, weights));
  ASSIGN_OR_RETURN(m.tokenizer, LoadTokenizerFor(*m.model, tokenizer_flag));
  return m;
}

std::function<void(const std::string&, size_t, size_t)> StageProgressPrinter() {
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  return [tty](const std::string& stage, size_t done, size_t total) {
    if (tty) {
      std::fprintf(stderr, "\r\033[K%zu/%zu %s", done, total, stage.c_str());
      if (done == total) std::fputc('\n', stderr);
    } else if (done == total || done % std::max<size_t>(1, total / 10) == 0) {
      std::fprintf(stderr, "%zu/%zu %s\n", done, total, stage.c_str());
    }
  };
}

std::function<void(int, int)> ProgressPrinter(const std::string& unit) {
  return [print = StageProgressPrinter(), unit](int done, int total) {
    print(unit, static_cast<size_t>(done), static_cast<size_t>(total));
  };
}

}  // namespace tierkv::app

int main(int argc, char** argv) {
  tierkv::app::InstallSignalCleanup();  // first: every thread inherits its signal mask
  CLI::App app{
      "tierkv: reuse of long LLM prompt prefixes from a tiered KV store.\n"
      "Subcommands run a real CPU transformer (llama2.c or GGUF llama models)."};
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "debug, info, warn, error or off")
      ->capture_default_str();
  tierkv::app::Action action;
  tierkv::app::AddRun(app, &action);
  tierkv::app::AddConvert(app, &action);
  tierkv::app::AddQuantize(app, &action);
  tierkv::app::AddInfo(app, &action);
  tierkv::app::AddBenchEngine(app, &action);
  tierkv::app::AddEval(app, &action);
  tierkv::app::AddAnalyze(app, &action);
  tierkv::app::AddBenchIo(app, &action);
  tierkv::app::AddSimCache(app, &action);
  tierkv::app::AddBenchIndex(app, &action);
  tierkv::app::AddInspect(app, &action);
  tierkv::app::AddVerify(app, &action);
  tierkv::app::AddCheck(app, &action);
  tierkv::app::AddCompare(app, &action);
  tierkv::app::AddServe(app, &action);
  tierkv::app::AddBenchServe(app, &action);
  tierkv::app::AddBench(app, &action);
  tierkv::app::AddPull(app, &action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  tierkv::LogLevel level;
  if (!tierkv::ParseLogLevel(log_level, &level)) {
    return tierkv::app::Fail("--log-level: unknown level '" + log_level + "'");
  }
  tierkv::SetLogLevel(level);
  return action ? action() : 1;
}

// JSON Lines of {"prefix": "...", "query": "..."}: the input of check and
// compare. Errors name the file, the line and the field.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "tierkv/engine.h"
#include "tierkv/status.h"
#include "tierkv/tokenizer.h"

namespace tierkv::app {

struct PromptPair {
  std::vector<int32_t> prefix;  // BOS + the prefix's tokens
  std::vector<int32_t> query;   // the query's tokens (at least one)
  std::vector<int32_t> Joined() const;
};

// The profiling prompts of an engine that uses profiles (car's sparsity,
// the fitted probe thresholds): the file's first prefixes.
inline constexpr size_t kProfilingPrompts = 8;
std::vector<std::vector<int32_t>> ProfilingPrompts(const std::vector<PromptPair>& reqs);
// An engine's fitted probe profile (alpha auto) as check and compare report
// it: per layer, threshold ("never": always all keys), recall, decided share.
nlohmann::json ProbeFitJson(const std::vector<engine::ProbeFit>& fits);

// Every request (BOS, prefix and query) must fit `context` tokens, the
// model's: a longer one is refused naming its line and both lengths.
Result<std::vector<PromptPair>> ReadPromptFile(const std::string& path, const Tokenizer& tok,
                                               size_t context);
// One line of a prompt file, tokenized; `where` (file and line) starts every
// error message. InvalidArgument naming the field, or JSON's own complaint.
Result<PromptPair> ParsePromptLine(const std::string& line, const std::string& where,
                                   const Tokenizer& tok);

// A scratch directory for a command's store: `flag` if set (kept), else a
// new directory under $TMPDIR or /var/tmp, removed when this goes away.
class ScratchDir {
 public:
  static Result<ScratchDir> Make(const std::string& flag, const std::string& name);
  ScratchDir(ScratchDir&& o) noexcept : path_(std::move(o.path_)), remove_(o.remove_) { o.remove_ = false; }
  ~ScratchDir();
  const std::string& path() const { return path_; }

 private:
  ScratchDir(std::string path, bool remove) : path_(std::move(path)), remove_(remove) {}
  std::string path_;
  bool remove_ = false;
};

// The flags check and compare share: the model, the request file, the store
// and the identification parameters.
struct EngineFlags {
  std::string model, tokenizer, prompt_file, cache_dir;
  // --alpha: "auto" (fitted per layer) or IMPRESS's exponent.
  std::string alpha = "auto";
  double probe_recall = 0.8;
  engine::Aggregation aggregation = engine::Aggregation::kSum;
  engine::PoolPolicy policy = engine::PoolPolicy::kSystemDefault;
  uint32_t chunk_tokens = 64;
  uint32_t maintain_interval_ms = 0;
  bool exact_store = false;
  double spec_min_recall = 0.9;
  engine::SelectionUnit unit;
  engine::StoreOrder store_order = engine::StoreOrder::kOff;
  std::string read_planner = "pages";
};
void AddEngineFlags(CLI::App* sub, EngineFlags* f);
// --alpha's value: nullopt for "auto", else the exponent; InvalidArgument otherwise.
Result<std::optional<double>> ParseAlpha(const std::string& s);
// The engine options the flags set (system and pool sizes left at their
// defaults), with the store in `cache_dir`.
engine::EngineOptions EngineOptionsFrom(const EngineFlags& f, const std::string& cache_dir,
                                        double retention);

// xxh3 of a tokenizer file's bytes (0 without one: the model's own
// vocabulary is part of its weights hash): part of the store's namespace.
uint64_t TokenizerHash(const std::string& path);

}  // namespace tierkv::app

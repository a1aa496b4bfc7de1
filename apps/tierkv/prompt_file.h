// The flags and helpers check, compare and bench share; their request files
// are read by tierkv/task_workload.h (errors name the file, line and field).
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

// A flag's value checked by the engine's own parser (the one place that
// knows the names); `names` is what --help shows.
template <typename Parse>
CLI::Validator ParsedBy(Parse parse, const std::string& names) {
  return CLI::Validator(
      [parse](std::string& s) {
        auto r = parse(s);
        return r.ok() ? std::string() : r.status().message();
      },
      names);
}

// A flag whose value the engine parses (`parse` returns Result<T>) into *out.
template <typename T, typename Parse>
void AddParsedOption(CLI::App* sub, const std::string& name, T* out, Parse parse, const std::string& help,
                     const std::string& names) {
  sub->add_option_function<std::string>(name, [out, parse](const std::string& s) { *out = *parse(s); }, help)
      ->check(ParsedBy(parse, names));
}


// --disk-budget-mib, on every command that opens a store: "auto" (the
// default: half of the free space of the cache directory's file system at
// start, counting the segments already there as free, at most 64 GiB), a
// number of MiB, or 0 (unlimited). It bounds the segment files, live and
// dead records together (store::SetDiskBudget).
void AddDiskBudgetFlag(CLI::App* sub, std::string* mib);
struct DiskBudget {
  uint64_t bytes = 0;  // 0: unlimited
  std::string how;     // for the line printed at start, e.g. "auto: half of 7.9 MiB free on /x"
};
// What --disk-budget-mib (checked by its validator) means for a store in
// `cache_dir` (it need not exist yet: its nearest existing parent's file
// system is measured). If that cannot be measured, unlimited, saying so.
DiskBudget ResolveDiskBudget(const std::string& mib, const std::string& cache_dir);

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

// The flags check, compare and bench share: the model, the store and the
// identification parameters.
struct EngineFlags {
  std::string model, tokenizer, cache_dir;
  std::string weights = "auto";  // --weights (tierkv/model.h WeightStorage)
  // --alpha: "auto" (fitted per layer) or IMPRESS's exponent.
  std::string alpha = "auto";
  std::string probe_recall = "auto";  // --probe-recall (engine::ParseProbeRecall)
  engine::ProbeFallback fallback = engine::ProbeFallback::kAllRows;
  engine::Aggregation aggregation = engine::Aggregation::kSum;
  engine::PoolPolicy policy = engine::PoolPolicy::kSystemDefault;
  uint32_t chunk_tokens = 64;
  uint32_t maintain_interval_ms = 0;
  bool exact_store = false;
  double spec_min_recall = 0.9;
  engine::SpecPredictor spec_predictor = engine::SpecPredictor::kLayerSet;
  engine::SelectionUnit unit;
  engine::StoreOrder store_order = engine::StoreOrder::kOff;
  std::string read_planner = "pages";
  std::string disk_budget = "auto";  // --disk-budget-mib
  RemoteOptions remote;
};
void AddEngineFlags(CLI::App* sub, EngineFlags* f);
// --prompt-file (required): check's and compare's request file.
void AddPromptFileFlag(CLI::App* sub, std::string* path);
// The engine options the flags set (system and pool sizes left at their
// defaults), with the store in `cache_dir`.
engine::EngineOptions EngineOptionsFrom(const EngineFlags& f, const std::string& cache_dir,
                                        double retention);

// xxh3 of a tokenizer file's bytes (0 without one: the model's own
// vocabulary is part of its weights hash): part of the store's namespace.
uint64_t TokenizerHash(const std::string& path);

}  // namespace tierkv::app

// Every engine option a command line can set, declared once (as llama.cpp's
// common/arg.cpp declares each flag once): run, serve, check, compare and
// bench call AddEngineFlags, and the flags write into one
// engine::EngineOptions whose own initializers are the defaults (--help
// prints them from there). What differs between the commands is passed in
// EngineFlagUse: what the cache directory means to each, and whether pools
// are sized in MiB (run, serve, check) or as shares of the stored K/V
// (compare, bench: their own --device-share / --host-share). The system and
// the retention stay each command's own: compare and bench take lists, and
// their defaults differ on purpose (1.0 where a user generates, 0.25 where
// systems are compared).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "tierkv/engine.h"
#include "tierkv/status.h"

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
CLI::Option* AddParsedOption(CLI::App* sub, const std::string& name, T* out, Parse parse, const std::string& help,
                             const std::string& names) {
  return sub->add_option_function<std::string>(name, [out, parse](const std::string& s) { *out = *parse(s); }, help)
      ->check(ParsedBy(parse, names));
}

struct EngineFlags {
  std::string model, tokenizer;
  WeightFlags weights;            // --weights, --crossover
  std::string cache_dir;         // empty: what the command's EngineFlagUse says
  std::string disk_budget = "auto";  // --disk-budget-mib, resolved against the cache directory at start
  // Every other engine flag writes here; cache_dir, disk_budget_bytes,
  // tokenizer_hash and retention are set by EngineOptionsFrom, the system
  // by the command.
  engine::EngineOptions engine;
};

struct EngineFlagUse {
  std::string cache_dir_help;  // what --cache-dir means to this command, its default included
  bool pool_mib = true;        // --device-mib and --host-mib
};

// Returns the flags that only mean something with a store (all but the
// model's and --cache-dir), for run's check below (run adds its --system
// and --retention).
std::vector<const CLI::Option*> AddEngineFlags(CLI::App* sub, EngineFlags* f, const EngineFlagUse& use);
// run without --cache-dir computes in memory: a store flag given then is a
// mistake, named (InvalidArgument).
Status CheckStoreFlagsUnused(const std::vector<const CLI::Option*>& store_flags);
// check's, compare's and bench's: a scratch store unless --cache-dir is given.
EngineFlagUse ScratchStoreUse(bool pool_mib);

// --disk-budget-mib: "auto" (the default: half of the free space of the
// cache directory's file system at start, counting the segments already
// there as free, at most 64 GiB), a number of MiB, or 0 (unlimited). It
// bounds the segment files, live and dead records together
// (store::SetDiskBudget).
struct DiskBudget {
  uint64_t bytes = 0;  // 0: unlimited
  std::string how;     // for the line printed at start, e.g. "auto: half of 7.9 MiB free on /x"
};
// What --disk-budget-mib (checked by its validator) means for a store in
// `cache_dir` (it need not exist yet: its nearest existing parent's file
// system is measured). If that cannot be measured, unlimited, saying so.
DiskBudget ResolveDiskBudget(const std::string& mib, const std::string& cache_dir);

// The engine options the flags set, with the tokenizer's hash and
// `retention` (the system is the caller's); the store has no place yet.
engine::EngineOptions EngineOptionsFrom(const EngineFlags& f, double retention);
// Puts the store in `cache_dir` and resolves --disk-budget-mib there.
DiskBudget PlaceStore(const EngineFlags& f, const std::string& cache_dir, engine::EngineOptions* o);
// Both: the options with the store in `cache_dir` (*budget says how its
// budget was chosen, if given).
engine::EngineOptions EngineOptionsFrom(const EngineFlags& f, const std::string& cache_dir, double retention,
                                        DiskBudget* budget = nullptr);

// xxh3 of a tokenizer file's bytes (0 without one: the model's own
// vocabulary is part of its weights hash): part of the store's namespace.
uint64_t TokenizerHash(const std::string& path);

}  // namespace tierkv::app

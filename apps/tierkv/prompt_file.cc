#include "prompt_file.h"

#include <sys/statvfs.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "remote_flags.h"
#include "signals.h"
#include "tierkv/commands.h"

namespace tierkv::app {

Result<ScratchDir> ScratchDir::Make(const std::string& flag, const std::string& name) {
  if (!flag.empty()) return ScratchDir(flag, false);
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/var/tmp") + "/tierkv-" + name + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return Status::IOError("cannot create a directory " + tmpl);
  RegisterScratch(tmpl);  // removed on SIGINT/SIGTERM too
  return ScratchDir(tmpl, true);
}

ScratchDir::~ScratchDir() {
  if (remove_) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    UnregisterScratch(path_);
  }
}

namespace {

// The auto budget's share of the free space and its cap. Half: the disk
// stays usable for its other tenants and the store's compaction (which
// writes a segment's live records before deleting it) has room beside it;
// 64 GiB: a default run on a large disk does not take hundreds of GiB
// unasked (--disk-budget-mib gives more).
constexpr uint64_t kAutoBudgetCap = 64ull << 30;

Result<std::optional<uint64_t>> ParseDiskBudgetMib(const std::string& s) {
  if (s == "auto") return std::optional<uint64_t>();
  char* end = nullptr;
  errno = 0;
  const double mib = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno != 0 || !(mib >= 0) || mib > double(1ull << 43)) {
    return Status::InvalidArgument("--disk-budget-mib: '" + s + "' is not auto or a number of MiB >= 0");
  }
  return std::optional<uint64_t>(static_cast<uint64_t>(mib * double(1u << 20)));
}

std::string Mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1u << 20));
  return buf;
}

}  // namespace

void AddDiskBudgetFlag(CLI::App* sub, std::string* mib) {
  sub->add_option("--disk-budget-mib", *mib,
                  "Bytes the cache directory's segment files may take, in MiB (live and dead records; "
                  "the least valuable chunks are evicted and dead bytes compacted to stay below): auto "
                  "(half of the free space of its file system at start, counting the store's own "
                  "segments as free, at most 64 GiB; printed at start), a number, or 0 (unlimited)")
      ->capture_default_str()
      ->check(ParsedBy(ParseDiskBudgetMib, "auto or a number of MiB"));
}

DiskBudget ResolveDiskBudget(const std::string& mib, const std::string& cache_dir) {
  auto parsed = ParseDiskBudgetMib(mib);
  if (!parsed.ok()) return DiskBudget{0, parsed.status().message()};  // the validator said so first
  if (parsed->has_value()) {
    const uint64_t b = **parsed;
    return DiskBudget{b, b == 0 ? "--disk-budget-mib 0: unlimited" : "--disk-budget-mib " + mib};
  }
  std::error_code ec;
  std::filesystem::path at = std::filesystem::absolute(cache_dir, ec);
  while (!at.empty() && !std::filesystem::exists(at, ec) && at != at.parent_path()) at = at.parent_path();
  struct statvfs vfs;
  if (::statvfs(at.c_str(), &vfs) != 0) {
    return DiskBudget{0, "auto: unlimited (the free space of " + at.string() + " is unknown: " +
                             std::strerror(errno) + ")"};
  }
  const uint64_t free_bytes = uint64_t{vfs.f_bavail} * vfs.f_frsize;
  uint64_t ours = 0;  // the store's segments: space it may reuse
  for (const auto& e : std::filesystem::directory_iterator(cache_dir, ec)) {
    if (e.path().filename().string().rfind("seg-", 0) == 0) ours += e.file_size(ec);
  }
  const uint64_t b = std::min(kAutoBudgetCap, (free_bytes + ours) / 2);
  return DiskBudget{b, "auto: half of " + Mib(free_bytes) + " free on " + at.string() +
                           (ours ? " and " + Mib(ours) + " of segments there" : "") +
                           (b == kAutoBudgetCap ? ", capped" : "")};
}

void AddPromptFileFlag(CLI::App* sub, std::string* path) {
  sub->add_option("--prompt-file", *path,
                  "Request file: JSON Lines of {\"prefix\", \"query\"} (docs/workloads.md: shared documents, "
                  "choices and labels too); each request (BOS, prefix, query and its longest choice) must fit "
                  "the model's context")
      ->required();
}

void AddEngineFlags(CLI::App* sub, EngineFlags* f) {
  sub->add_option("--model", f->model,
                  "Model file (default: $TIERKV_MODEL, else " + DefaultModelPath() + ")");
  sub->add_option("--tokenizer", f->tokenizer, "Tokenizer (default: the model's own)");
  AddWeightsFlag(sub, &f->weights);
  sub->add_option("--cache-dir", f->cache_dir,
                  "Cache directory (default: a new one under $TMPDIR or /var/tmp, removed after)");
  AddDiskBudgetFlag(sub, &f->disk_budget);
  sub->add_option("--alpha", f->alpha,
                  "When the probe heads decide a layer: auto (thresholds fitted per layer on "
                  "profiling prompts so that the probes' shared set keeps --probe-recall of the "
                  "attention mass of H2O's per-head sets; layers where none does fall back, see --fallback) or "
                  "IMPRESS's exponent a in "
                  "[0, 16] (the probes decide when their mean pairwise Jaccard is at least j^a, "
                  "j: random sets' Jaccard; the paper's 0.6)")
      ->capture_default_str()
      ->check(ParsedBy(engine::ParseAlpha, "auto or a number in [0, 16]"));
  sub->add_option("--probe-recall", f->probe_recall,
                  "--alpha auto: the share of each head's attention mass in its own best set "
                  "(H2O's per-head selection), averaged over the heads, that the probes' shared "
                  "set must keep for them to decide a layer: a number in [0, 1] or auto (0.5 + 0.8 x "
                  "retention, at most 0.9: 0.7 at 0.25, 0.9 from 0.5, where a user asks for fidelity)")
      ->capture_default_str()
      ->check(ParsedBy(engine::ParseProbeRecall, "auto or a number in [0, 1]"));
  AddParsedOption(sub, "--fallback", &f->fallback, engine::ParseProbeFallback,
                  "What impress and spec read in a layer whose probes do not decide: all (the "
                  "default: every prefix row, read from the request's start where the layer fell "
                  "back in the previous request) or h2o (IMPRESS's: all keys, then each head's "
                  "top rows)",
                  "all or h2o");
  AddParsedOption(sub, "--aggregation", &f->aggregation, engine::ParseAggregation,
                  "How the probe heads' sets combine: sum (default) or vote", "sum or vote");
  AddParsedOption(sub, "--granularity", &f->unit, engine::ParseSelectionUnit,
                  "Selective systems choose or skip as one: auto (the default: blocks of up to 64 "
                  "tokens at retention 0.25 or below, smaller while a layer would keep fewer than 8, "
                  "page above), page (the consecutive tokens whose rows "
                  "share a 4 KiB page of a chunk's record, 8 for the default model), token "
                  "(single rows) or block:N (N consecutive tokens)",
                  "auto, token, page or block:N");
  AddParsedOption(sub, "--store-order", &f->store_order, engine::ParseStoreOrder,
                  "Write stored rows once more in the storing request's importance order (twice "
                  "the bytes written; single-row selection, --granularity token, then touches few "
                  "pages): off (the default), system (impress-ro, impress, spec and car do; "
                  "compare's store is written so), or on",
                  "system, on or off");
  sub->add_option("--read-planner", f->read_planner,
                  "How selective reads fetch a record's pages: pages (the default: only the "
                  "needed pages, adjacent ones merged) or model (gaps the store's measured cost "
                  "model, IO-MODEL, says are cheaper to read than to skip are read through: "
                  "fewer, larger reads; ~10% more bytes and no faster on the disks measured, "
                  "docs/systems.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"model", "pages"}));
  sub->add_option("--chunk-tokens", f->chunk_tokens,
                  "Tokens per chunk (at most what one record's header lists: several hundred for "
                  "small models; a larger value is refused naming this model's limit)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  AddParsedOption(sub, "--policy", &f->policy, engine::ParsePoolPolicy,
                  "Device/host pool policy: lru, lfu, score or car (default: each system's own: "
                  "lfu for as-h2o-lfu, score for impress and spec, car for car, else lru)",
                  "lru, lfu, score or car");
  sub->add_option("--maintain-interval-ms", f->maintain_interval_ms,
                  "Run background maintenance (impress, impress-ro, spec: KV reordering) every "
                  "this many ms on its own thread (0: off)")
      ->capture_default_str();
  sub->add_option("--spec-min-recall", f->spec_min_recall,
                  "spec: prefetch a layer's predicted rows only while the prediction's recall "
                  "there (a moving average) is at least this (0: always, as SPEC publishes; the "
                  "default 0.9 because reading ahead 0.8-recall predictions made cold requests "
                  "slower here, docs/systems.md)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  AddParsedOption(sub, "--spec-predictor", &f->spec_predictor, engine::ParseSpecPredictor,
                  "spec: how layer l+1's rows are predicted while layer l computes: set (layer l's "
                  "own set, as SPEC publishes; the default) or queries (layer l+1's probe heads "
                  "scored with the queries it would compute from layer l's input)",
                  "set or queries");
  sub->add_flag("--exact-store", f->exact_store,
                "Selective systems: store NR's K/V computed again over all of R (after the first "
                "token) instead of over the rows they selected");
  AddRemoteFlags(sub, &f->remote);
}

engine::EngineOptions EngineOptionsFrom(const EngineFlags& f, const std::string& cache_dir,
                                        double retention) {
  engine::EngineOptions o;
  o.chunk_tokens = f.chunk_tokens;
  o.cache_dir = cache_dir;
  o.disk_budget_bytes = ResolveDiskBudget(f.disk_budget, cache_dir).bytes;
  o.retention = retention;
  auto alpha = engine::ParseAlpha(f.alpha);  // checked by the flag's validator
  o.alpha_auto = !alpha->has_value();
  if (alpha->has_value()) o.alpha = **alpha;
  o.probe_recall = *engine::ParseProbeRecall(f.probe_recall);  // checked by the flag's validator
  o.aggregation = f.aggregation;
  o.fallback = f.fallback;
  o.policy = f.policy;
  o.maintain_interval_ms = f.maintain_interval_ms;
  o.exact_store = f.exact_store;
  o.spec_min_recall = f.spec_min_recall;
  o.spec_predictor = f.spec_predictor;
  o.unit = f.unit;
  o.store_order = f.store_order;
  o.merge_read_gaps = f.read_planner == "model";
  o.tokenizer_hash = TokenizerHash(f.tokenizer);
  o.remote = f.remote;
  return o;
}

uint64_t TokenizerHash(const std::string& path) {
  if (path.empty()) return 0;
  std::ifstream t(path, std::ios::binary);
  std::stringstream bytes;
  bytes << t.rdbuf();
  const std::string s = bytes.str();
  return XXH3_64bits(s.data(), s.size());
}

}  // namespace tierkv::app

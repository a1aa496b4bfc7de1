#include "engine_flags.h"

#include <sys/statvfs.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "remote_flags.h"
#include "commands.h"

namespace tierkv::app {

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

void AddDiskBudgetFlag(CLI::App* sub, std::string* mib) {
  sub->add_option("--disk-budget-mib", *mib,
                  "Bytes the cache directory's segment files may take, in MiB (live and dead records; "
                  "the least valuable chunks are evicted and dead bytes compacted to stay below): auto "
                  "(half of the free space of its file system at start, counting the store's own "
                  "segments as free, at most 64 GiB; printed at start), a number, or 0 (unlimited)")
      ->capture_default_str()
      ->check(ParsedBy(ParseDiskBudgetMib, "auto or a number of MiB"));
}

}  // namespace

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


namespace {

void AddModelFlags(CLI::App* sub, EngineFlags* f) {
  sub->add_option("--model", f->model,
                  "Model file (GGUF llama/qwen2/mistral, or llama2.c) or a pulled model's name (tierkv pull) "
                  "(default: $TIERKV_MODEL, else " +
                      DefaultModelPath() + ")");
  sub->add_option("--tokenizer", f->tokenizer,
                  "SentencePiece .model, a GGUF file's tokenizer or llama2.c tokenizer.bin (default: the "
                  "model's own)");
  AddWeightsFlag(sub, &f->weights);
}

// The store: where, how large, what a chunk is, how rows are written and read.
void AddStoreFlags(CLI::App* sub, EngineFlags* f, const EngineFlagUse& use) {
  engine::EngineOptions& e = f->engine;
  AddDiskBudgetFlag(sub, &f->disk_budget);
  sub->add_option("--chunk-tokens", e.chunk_tokens,
                  "Tokens per chunk (at most what one record's header lists: several hundred for "
                  "small models; a larger value is refused naming this model's limit)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  AddParsedOption(sub, "--store-order", &e.store_order, engine::ParseStoreOrder,
                  "Write stored rows once more in the storing request's importance order (twice "
                  "the bytes written; single-row selection, --granularity token, then touches few "
                  "pages): off (the default), system (impress-ro, impress, spec and car do; "
                  "compare's store is written so), or on. With --remote, chunks then go up in that "
                  "order, and a reader with --remote-read important fetches only their important part",
                  "system, on or off")
      ->default_str(std::string(engine::StoreOrderName(e.store_order)));
  sub->add_option_function<std::string>(
         "--read-planner", [&e](const std::string& s) { e.disk.merge_read_gaps = s == "model"; },
         "How selective reads fetch a record's pages: pages (the default: only the "
         "needed pages, adjacent ones merged) or model (gaps the store's measured cost "
         "model, IO-MODEL, says are cheaper to read than to skip are read through: "
         "fewer, larger reads; ~10% more bytes and no faster on the disks measured, "
         "docs/systems.md)")
      ->default_str(e.disk.merge_read_gaps ? "model" : "pages")
      ->check(CLI::IsMember({"model", "pages"}));
  AddParsedOption(sub, "--io-backend", &e.disk.io_backend, store::ParseIoBackend,
                  "How the store reads records: auto (io_uring where the kernel allows it, else "
                  "pread), uring or pread",
                  "auto, uring or pread")
      ->default_str(e.disk.io_backend);
  sub->add_option_function<std::string>(
         "--direct-io", [&e](const std::string& s) { e.disk.direct_io = s == "on"; },
         "Open the store's record files with O_DIRECT: on, or off for a file system without it "
         "(tmpfs before Linux 6.6, some network file systems); off also skips measuring the disk (IO-MODEL)")
      ->default_str(e.disk.direct_io ? "on" : "off")
      ->check(CLI::IsMember({"on", "off"}));
  sub->add_flag("--exact-store", e.exact_store,
                "Selective systems: store NR's K/V computed again over all of R (after the first "
                "token) instead of over the rows they selected");
  if (use.pool_mib) {
    // The pools above the disk, in MiB (compare and bench size them as
    // shares of the stored K/V instead).
    sub->add_option_function<uint64_t>(
           "--device-mib", [&e](uint64_t m) { e.device_bytes = m << 20; },
           "The device pool's size (MiB), the fastest tier above the disk")
        ->default_str(std::to_string(e.device_bytes >> 20))
        ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 30));
    sub->add_option_function<uint64_t>(
           "--host-mib", [&e](uint64_t m) { e.host_bytes = m << 20; },
           "The host pool's size (MiB), between the device pool and the disk")
        ->default_str(std::to_string(e.host_bytes >> 20))
        ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 30));
  }
  AddParsedOption(sub, "--policy", &e.policy, engine::ParsePoolPolicy,
                  "Device/host pool policy: lru, lfu, score or car (default: each system's own: "
                  "lfu for as-h2o-lfu, score for impress and spec, car for car, else lru)",
                  "lru, lfu, score or car");
  sub->add_option("--maintain-interval-ms", e.maintain_interval_ms,
                  "Run background maintenance (impress, impress-ro, spec: KV reordering) every "
                  "this many ms on its own thread (0: off)")
      ->capture_default_str();
}

// How the selective systems choose a prefix's rows.
void AddSelectionFlags(CLI::App* sub, EngineFlags* f) {
  engine::EngineOptions& e = f->engine;
  sub->add_option_function<std::string>(
         "--alpha",
         [&e](const std::string& s) {
           auto alpha = *engine::ParseAlpha(s);  // checked by the validator
           e.alpha_auto = !alpha.has_value();
           if (alpha) e.alpha = *alpha;
         },
         "When the probe heads decide a layer: auto (thresholds fitted per layer on "
         "profiling prompts so that the probes' shared set keeps --probe-recall of the "
         "attention mass of H2O's per-head sets; layers where none does fall back, see --fallback) or "
         "IMPRESS's exponent a in [0, 16] (the probes decide when their mean pairwise Jaccard is at "
         "least j^a, j: random sets' Jaccard; the paper's 0.6)")
      ->default_str(e.alpha_auto ? "auto" : std::to_string(e.alpha))
      ->check(ParsedBy(engine::ParseAlpha, "auto or a number in [0, 16]"));
  AddParsedOption(sub, "--probe-recall", &e.probe_recall, engine::ParseProbeRecall,
                  "--alpha auto: the share of each head's attention mass in its own best set "
                  "(H2O's per-head selection), averaged over the heads, that the probes' shared "
                  "set must keep for them to decide a layer: a number in [0, 1] or auto (0.5 + 0.8 x "
                  "retention, at most 0.9: 0.7 at 0.25, 0.9 from 0.5, where a user asks for fidelity)",
                  "auto or a number in [0, 1]")
      ->default_str(e.probe_recall == engine::kProbeRecallAuto ? "auto" : std::to_string(e.probe_recall));
  AddParsedOption(sub, "--fallback", &e.fallback, engine::ParseProbeFallback,
                  "What impress and spec read in a layer whose probes do not decide: all (the "
                  "default: every prefix row, read from the request's start where the layer fell "
                  "back in the previous request) or h2o (IMPRESS's: all keys, then each head's "
                  "top rows)",
                  "all or h2o")
      ->default_str(std::string(engine::ProbeFallbackName(e.fallback)));
  AddParsedOption(sub, "--aggregation", &e.aggregation, engine::ParseAggregation,
                  "How the probe heads' sets combine: sum (default) or vote", "sum or vote")
      ->default_str(std::string(engine::AggregationName(e.aggregation)));
  AddParsedOption(sub, "--granularity", &e.unit, engine::ParseSelectionUnit,
                  "Selective systems choose or skip as one: auto (the default: blocks of up to 64 "
                  "tokens at retention 0.25 or below, smaller while a layer would keep fewer than 8, "
                  "page above), page (the consecutive tokens whose rows "
                  "share a 4 KiB page of a chunk's record, 8 for the default model), token "
                  "(single rows) or block:N (N consecutive tokens)",
                  "auto, token, page or block:N")
      ->default_str(engine::SelectionUnitName(e.unit));
  AddParsedOption(sub, "--score-pool", &e.score_pool, engine::ParseScorePool,
                  "Selective systems: each row's importance becomes the largest within B rows before "
                  "and A rows after it (B:A; N: N on either side, SnapKV's max pooling; off), so the "
                  "rows after an attended key, such as a needle's value, are kept with it "
                  "(docs/accuracy.md)",
                  "off, N or B:A")
      ->default_str(engine::ScorePoolName(e.score_pool));
  sub->add_option("--spec-min-recall", e.spec_min_recall,
                  "spec: prefetch a layer's predicted rows only while the prediction's recall "
                  "there (a moving average) is at least this (0: always, as SPEC publishes; the "
                  "default is above that because reading ahead 0.8-recall predictions made cold "
                  "requests slower here, docs/systems.md)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  AddParsedOption(sub, "--spec-predictor", &e.spec_predictor, engine::ParseSpecPredictor,
                  "spec: how layer l+1's rows are predicted while layer l computes: set (layer l's "
                  "own set, as SPEC publishes; the default) or queries (layer l+1's probe heads "
                  "scored with the queries it would compute from layer l's input)",
                  "set or queries")
      ->default_str(std::string(engine::SpecPredictorName(e.spec_predictor)));
}

}  // namespace

std::vector<const CLI::Option*> AddEngineFlags(CLI::App* sub, EngineFlags* f, const EngineFlagUse& use) {
  AddModelFlags(sub, f);
  sub->add_option("--cache-dir", f->cache_dir, use.cache_dir_help);
  const size_t before = sub->get_options().size();
  AddStoreFlags(sub, f, use);
  AddSelectionFlags(sub, f);
  AddRemoteFlags(sub, &f->engine.remote);
  std::vector<const CLI::Option*> store_flags;
  for (const CLI::Option* o : sub->get_options()) store_flags.push_back(o);
  store_flags.erase(store_flags.begin(), store_flags.begin() + static_cast<std::ptrdiff_t>(before));
  return store_flags;
}

Status CheckStoreFlagsUnused(const std::vector<const CLI::Option*>& store_flags) {
  for (const CLI::Option* o : store_flags) {
    if (o->count() > 0) return Status::InvalidArgument(o->get_name() + " needs --cache-dir (nothing is stored without it)");
  }
  return Status::Ok();
}

EngineFlagUse ScratchStoreUse(bool pool_mib) {
  return EngineFlagUse{"Cache directory (default: a new one under $TMPDIR or /var/tmp, removed after)", pool_mib};
}

engine::EngineOptions EngineOptionsFrom(const EngineFlags& f, double retention) {
  engine::EngineOptions o = f.engine;
  o.retention = retention;
  o.tokenizer_hash = TokenizerHash(f.tokenizer);
  return o;
}

DiskBudget PlaceStore(const EngineFlags& f, const std::string& cache_dir, engine::EngineOptions* o) {
  o->cache_dir = cache_dir;
  const DiskBudget b = ResolveDiskBudget(f.disk_budget, cache_dir);
  o->disk_budget_bytes = b.bytes;
  return b;
}

engine::EngineOptions EngineOptionsFrom(const EngineFlags& f, const std::string& cache_dir, double retention,
                                        DiskBudget* budget) {
  engine::EngineOptions o = EngineOptionsFrom(f, retention);
  const DiskBudget b = PlaceStore(f, cache_dir, &o);
  if (budget) *budget = b;
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

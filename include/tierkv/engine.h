// The engine: a request's stored prefix R is found in the store, its K/V
// rows are loaded layer by layer (only the important ones, for the
// selective systems) through the device and host pools, the rest of the
// prompt is computed over them, and its K/V are stored for later requests.
// Every system of the papers is a row of one table (src/engine/system_table.h;
// docs/systems.md), so that they all run the same work:
//   recompute     no reuse
//   as-like       all of R's rows, read from the request's start (AttentionStore)
//   as-h2o-lru/-lfu  all keys, each KV head's H2O top-k, only those values
//   impress-itf   probe-head identification (IMPRESS 4.3), H2O where the probes disagree
//   impress-ro    plus importance reports: reordering packs important rows (4.4.1)
//   impress       plus score-based pools (4.4.2)
//   spec          impress plus SPEC's speculation (layer l's set read ahead for l+1)
//   car           CaR: per-layer retention from a sparsity profile, H2O, car pools
//
// Threads: Serve runs on the caller's thread (with the model's compute
// workers); one `tierkv-load` thread per engine serves reads queued by
// requests, nearest layer first; `tierkv-maint` runs Maintain on a timer
// when maintain_interval_ms is set. A request's path through the modules,
// its buffers and who owns them: docs/architecture.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tierkv/model.h"
#include "tierkv/pool_stats.h"
#include "tierkv/remote.h"
#include "tierkv/sequence.h"
#include "tierkv/status.h"
#include "tierkv/store.h"

namespace tierkv::store {
class ChunkStore;
}

namespace tierkv::engine {

enum class System {
  kRecompute,
  kAsLike,
  kAsH2oLru,
  kAsH2oLfu,
  kImpress,
  kImpressItf,
  kImpressRo,
  kSpec,
  kCar,
};
std::string_view SystemName(System s);
// InvalidArgument listing the known names.
Result<System> ParseSystem(std::string_view name);
// Every system, in the order of the system table (docs/systems.md).
std::span<const System> AllSystems();
// The files an engine keeps in its cache directory beside the store's (car's
// profile): tools that open a cache directory without an engine tolerate them.
std::vector<std::string> OwnerFiles();

// What a caller may ask of a system (its row of the system table).
struct SystemTraits {
  bool reuses = false;      // reuses stored K/V (false: recompute)
  bool selective = false;   // reads some of each chunk layer's rows
  bool profiled = false;    // per-layer retention from a sparsity profile (Engine::Profile)
  bool speculates = false;  // reads the next layer's rows ahead (per-layer recall in the trace)
  bool reorders = false;    // reports importance; Maintain() reorders the store
};
SystemTraits TraitsOf(System s);

// How the probe heads' top-k sets combine into a layer's set (IMPRESS 4.3):
// their summed scores, or a vote.
enum class Aggregation { kSum, kVote };
std::string_view AggregationName(Aggregation a);
Result<Aggregation> ParseAggregation(std::string_view name);

// What a layer whose probe heads do not decide reads and attends to:
// kAllRows, every row of R (its whole records, requested at the request's
// start when the layer fell back in the previous request, as as-like
// does); kH2o, IMPRESS's: all of R's keys, then each head's own top rows
// (one more read, dependent on the scores). On the default model all rows
// agree with recompute more and wait less (docs/systems.md, "The probes'
// target").
enum class ProbeFallback { kAllRows, kH2o };
std::string_view ProbeFallbackName(ProbeFallback f);  // "all" or "h2o"
Result<ProbeFallback> ParseProbeFallback(std::string_view name);

// The device and host pools' eviction policy; kSystemDefault: the system's
// own (lfu for as-h2o-lfu, score for impress and spec, car for car, lru for
// the others).
enum class PoolPolicy { kSystemDefault, kLru, kLfu, kScore, kCar };
std::string_view PoolPolicyName(PoolPolicy p);  // "default" for kSystemDefault
// lru, lfu, score or car; InvalidArgument naming the known ones.
Result<PoolPolicy> ParsePoolPolicy(std::string_view name);

// What selective systems choose or skip as one: single rows (token), the
// rows that share a 4 KiB page of the stored layout (page: with the store
// packed by importance, those are rows of like importance), or blocks of
// consecutive tokens (block:N, ContiguousKV's unit). Coarser units read
// whole pages: fewer bytes per selected row, rows chosen less finely.
// auto (the default): at retention kAutoBlockRetention and below, blocks of
// up to 64 tokens, as large as keep a layer's selection at 8 units or more
// (a unit's rounding then adds at most an eighth); pages otherwise
// (ResolveUnit; docs/systems.md has the measurements behind it).
enum class Granularity { kToken, kPage, kBlock, kAuto };
struct SelectionUnit {
  Granularity granularity = Granularity::kAuto;
  uint32_t block_tokens = 16;  // kBlock only
  bool operator==(const SelectionUnit&) const = default;
};
inline constexpr double kAutoBlockRetention = 0.25;
inline constexpr uint32_t kAutoBlockTokens = 64;
inline constexpr uint32_t kAutoMinUnits = 8;
// The unit a request at `retention` over `reused_rows` rows of `row_bytes`
// each selects by: u itself unless auto.
SelectionUnit ResolveUnit(SelectionUnit u, double retention, size_t reused_rows, uint32_t row_bytes);
// "token", "page", "block:N" or "auto".
std::string SelectionUnitName(SelectionUnit u);
// InvalidArgument naming the accepted forms (N in 1..4096).
Result<SelectionUnit> ParseSelectionUnit(std::string_view name);

enum class StoreOrder { kSystem, kOn, kOff };
// "system", "on", "off"; InvalidArgument naming them.
std::string_view StoreOrderName(StoreOrder o);
Result<StoreOrder> ParseStoreOrder(std::string_view name);

// spec: how layer l+1's rows are predicted while layer l computes.
// kLayerSet: layer l's own set (SPEC IV-C). kQueries: layer l+1's probe
// heads decide over its probe keys (read at the request's start) with the
// queries layer l+1 would compute from layer l's input: its norm and
// projections applied to the residual stream one layer early, which
// changes little from one layer to the next (as InfiniGen observes).
enum class SpecPredictor { kLayerSet, kQueries };
// "set" or "queries".
std::string_view SpecPredictorName(SpecPredictor p);
Result<SpecPredictor> ParseSpecPredictor(std::string_view name);

// EngineOptions::probe_recall's default: the target follows the retention.
inline constexpr double kProbeRecallAuto = -1;
// The recall target of alpha_auto at a retention r: 0.5 + 0.8 r, at most
// 0.9 (0.6 at 0.125, 0.7 at 0.25, 0.9 from 0.5): where few rows are kept,
// reading few is the point and a shared set costs under a point of top-1
// agreement on the default model; from 0.5 a user asks for fidelity and
// the layers whose heads disagree most fall back (docs/systems.md, "The
// probes' target and fallback": the measurements behind it).
double ProbeRecallFor(double retention);
// "auto" (kProbeRecallAuto) or a number in [0, 1].
Result<double> ParseProbeRecall(std::string_view text);
// --alpha: "auto" (nullopt: EngineOptions::alpha_auto) or IMPRESS's exponent in [0, 16].
Result<std::optional<double>> ParseAlpha(std::string_view text);

// EngineOptions::score_pool's bound (rows on either side).
inline constexpr uint32_t kMaxScorePool = 256;

// How selection widens what the query attends (EngineOptions::score_pool):
// each row's importance becomes the largest within `before` rows before it
// and `after` rows after it (select::MaxPoolWindow). {0, 0}: off.
struct ScorePool {
  uint32_t before = 0;
  uint32_t after = 0;
  bool operator==(const ScorePool&) const = default;
};
// "N" (N rows on either side, SnapKV's max pooling), "B:A" (B before, A
// after; "64:0" carries an attended key's score onto the 64 rows that follow
// it) or "off"; each at most kMaxScorePool.
Result<ScorePool> ParseScorePool(std::string_view text);
std::string ScorePoolName(ScorePool p);

struct EngineOptions {
  System system = System::kAsLike;
  double retention = 1.0;          // share of R's rows used per layer (selective systems)
  // impress/spec: whether the probe heads decide a layer. alpha_auto (the
  // default): by per-layer thresholds fitted to the model on profiling
  // prompts so that the probes' shared set keeps, averaged over the KV
  // heads, probe_recall of the attention mass each head's own best set
  // holds (H2O's per-head selection; Engine::Profile; layers where no
  // threshold reaches it read all keys and select per head).
  // kProbeRecallAuto (the default): ProbeRecallFor(retention). Otherwise
  // IMPRESS's rule: their Jaccard >= j^alpha.
  bool alpha_auto = true;
  double probe_recall = kProbeRecallAuto;
  ProbeFallback fallback = ProbeFallback::kAllRows;  // impress/spec: layers the probes do not decide
  double alpha = 0.6;
  Aggregation aggregation = Aggregation::kSum;  // impress/spec
  SelectionUnit unit;              // selective systems: what is chosen or skipped as one
  // Selective systems: each row's importance becomes the largest within
  // score_pool.before rows before it and score_pool.after rows after it
  // before selection (select::MaxPoolWindow), so that the rows after an
  // attended key (a needle's value) are kept with it (docs/accuracy.md).
  // The fitted probe thresholds (alpha auto) are fitted on unpooled scores.
  ScorePool score_pool;
  // Testing only (tierkv bench --select-lowest): the selective systems keep
  // the rows of LOWEST importance, a deliberately wrong selection, so that
  // an accuracy gate can be seen to fail. Never set in serving.
  bool select_lowest = false;
  PoolPolicy policy = PoolPolicy::kSystemDefault;
  uint32_t chunk_tokens = 64;
  std::string cache_dir;           // the disk tier; required unless system is recompute
  // Bytes the cache directory's segment files may hold, live and dead records
  // together (store::SetDiskBudget splits it); 0: unlimited. The commands'
  // --disk-budget-mib auto sets half the free space at start.
  uint64_t disk_budget_bytes = 0;
  uint64_t device_bytes = 64ull << 20;
  uint64_t host_bytes = 256ull << 20;
  store::DiskOptions disk;          // the disk tier's I/O (include/tierkv/store.h)
  uint64_t tokenizer_hash = 0;     // part of the store's namespace
  // Run Maintain() on a `tierkv-maint` thread every this many ms (0: only
  // when called). IMPRESS reorders every few minutes.
  uint32_t maintain_interval_ms = 0;
  // Selective systems compute NR's K/V over a reduced R; stored as they are,
  // a later request reuses an approximation of an approximation (the drift,
  // docs/systems.md). With exact_store, NR's K/V are computed again over
  // all of R after the first token, and those are stored (store_ms).
  bool exact_store = false;
  // spec: speculate for a layer only while its prediction recall (a moving
  // average over requests, measured whether or not it was speculated) stays
  // at least this; below, the layer loads as impress does. 0: always
  // (SPEC as published). 0.9 by default: on the default model the layers
  // that are read ahead predict 0.76-0.83 of their rows, and reading them
  // ahead made cold requests slower (docs/systems.md, "Read efficiency,
  // part 2"); layers that predict better still are read ahead.
  double spec_min_recall = 0.9;
  SpecPredictor spec_predictor = SpecPredictor::kLayerSet;
  // Whether stored rows are written once more in the storing request's
  // importance order (twice the bytes written), so that a store is packed
  // before any maintenance round: kSystem for the systems whose row says so
  // (impress-ro, impress, spec, car), kOn for every reusing system (a store
  // written by as-like requests for selective readers), kOff never (only
  // maintenance rounds reorder). Off by default: the packed copy pays off
  // for single-row selection (unit token); with page units the pages of the
  // chunks' own records are read (fewer blocks) and it is never used
  // (docs/systems.md has the measurements).
  StoreOrder store_order = StoreOrder::kOff;
  // A shared tier below the disk (Redis or Redis Cluster; docs/remote.md):
  // a request looks past its local match there, and chunks go up behind
  // the requests. Empty url: none. Its failures are misses, never errors.
  RemoteOptions remote;
  // InvalidArgument naming the bad field.
  Status Validate() const;
};

// The namespace of the K/V a store holds for `model` under `options`: the
// model's weights and shape, the tokenizer, the KV dtype (fp16) and
// chunk_tokens. A store of another fingerprint is never read.
uint64_t StoreFingerprint(const Model& model, const EngineOptions& options);

// When one layer's load was issued, finished and consumed, in ms from the
// request's start: the proof of overlap.
struct LayerTrace {
  double issued_ms = 0, completed_ms = 0, consumed_ms = 0;
  size_t rows = 0;       // prefix rows supplied to the attention (mean over KV heads)
  double retention = 1;  // rows / |R|
  bool fallback = false; // impress/spec: the probes did not decide; the options' fallback served the layer
  double recall = -1;    // spec: share of this layer's set the prediction held (-1: none)
  bool speculated = false;  // spec: the prediction was read ahead (else only measured)
  double wait_ms = 0;    // how long the compute thread waited for this layer's reads
};

struct RequestStats {
  size_t prompt_tokens = 0, reused_tokens = 0, computed_tokens = 0;
  double lookup_ms = 0, identify_ms = 0, load_wait_ms = 0, compute_ms = 0, ttft_ms = 0;
  double store_ms = 0;  // after the first token (not in ttft)
  uint64_t disk_bytes_read = 0, disk_chunks_read = 0;
  uint64_t device_bytes_read = 0, host_bytes_read = 0;  // copied out of the pools
  uint64_t device_hits = 0, host_hits = 0, disk_reads = 0;  // chunk-layer accesses by tier
  uint64_t stored_chunks = 0;
  // Chunks this request found in the remote tier (fetched, verified and
  // admitted into the disk tier before its reads), their bytes, and the
  // time the remote lookup took (in lookup_ms and ttft_ms).
  uint64_t remote_chunks = 0, remote_bytes = 0;
  double remote_ms = 0;
  // RemoteRead::kImportant: chunks past the local prefix read in part (their
  // important rows, in remote_bytes too), attended to as they are: they
  // count in reused_tokens; the prompt is then not stored (the store holds
  // whole chunks only, and the part before the prompt's new chunks is not local).
  uint64_t remote_important_chunks = 0;
  // What the rows the request used take when read exactly, the ideal its
  // disk and pool reads are compared with: all of R's K and V (whole-row
  // systems); R's keys and the used rows' values (H2O, and a probe layer
  // that fell back); R's probe-head keys and the used rows' K and V (a
  // layer the probes decided); plus, for selective systems, the K and V of
  // the rows past R's whole chunks, read whole.
  uint64_t ideal_bytes = 0;
  // Storing the prompt failed (a full disk, an I/O error): the answer stands,
  // later requests lose this reuse. Logged with the reason. Behind the
  // request (ServeOptions::store_behind): not queued (dropped).
  bool store_failed = false;
  bool store_queued = false;  // queued for the store writer (store_behind)
  int fallback_layers = 0;  // impress/spec: layers the probes did not decide (EngineOptions::fallback)
  // > 1: stored data failed mid-request (damaged, unreadable) and the
  // request ran again with less reuse, down to none if need be: damage is a
  // miss, never a failed request.
  int attempts = 1;
  double device_hit_ratio() const;
  std::vector<LayerTrace> layers;
};

// One layer of a fitted probe profile (alpha_auto).
struct ProbeFit {
  double threshold = 0;       // the probes decide when their Jaccard >= this (inf: never)
  double recall = 0;          // mean recall of the probes' set over the profiling samples
  double decided = 0;         // share of the samples the probes decide
  double decided_recall = 0;  // the mean recall of those
};

struct ServeOptions {
  // Logits of positions [logits_from, n) are returned (row-major, vocab
  // each); the default: the last position only. Positions from logits_from
  // on are always computed, never reused.
  size_t logits_from = std::numeric_limits<size_t>::max();
  bool store = true;  // store the prompt's K/V for later requests
  // Keep the request's K/V (ServeResult::sequence) to generate from: the
  // prefix rows its attention read and the rows it computed (sequence.h).
  bool keep_kv = false;
  // This request's share of the prefix rows per layer (selective systems),
  // in (0, 1]; < 0: the engine's (EngineOptions::retention). car scales its
  // profile's per-layer shares to it; impress and spec decide by IMPRESS's
  // j^alpha when it differs from the engine's (their fitted thresholds are
  // for the engine's retention). InvalidArgument for a system that reads
  // every row (recompute, as-like) unless it is 1.
  double retention = -1;
  // The caller's scheduler raises the car pool policy's score events
  // (Engine::OnSchedulerEvent); false: Serve raises window entry and start
  // as it begins and finish as it returns.
  bool scheduler_events = false;
  // Whose stored prefixes this request may reuse and adds to: a tenant's
  // namespace (the server's API key and cache_salt), 0 the shared one. A
  // prefix stored under one namespace is never found under another, in the
  // disk tier, the pools or the remote tier (index/radix_tree.h).
  uint64_t cache_namespace = 0;
  // Ask the remote tier (--remote) during the request's lookup; false: the
  // local store only, for a caller whose remote lookups ran ahead
  // (Engine::FetchAhead) so that its thread never waits on Redis.
  bool remote_lookup = true;
  // Store the prompt behind the request: its K/V are queued for the
  // engine's store writer (`tierkv-store-w`), so a slow or hung disk never
  // holds the caller; dropped (counted) when the writer is stalled or its
  // queue full (StoreBehindStats). A later request sharing the prompt's
  // first chunk waits for that write (at most 200 ms; not while stalled).
  // false: stored before Serve returns.
  bool store_behind = false;
};

// The prompts stored behind their requests (ServeOptions::store_behind).
struct StoreBehindStats {
  uint64_t queued = 0, queued_bytes = 0;  // waiting now
  uint64_t stored = 0;                    // puts done
  uint64_t failed = 0;                    // puts that failed (logged)
  uint64_t dropped = 0;                   // prompts not queued: the queue full or the writer stalled
  double running_ms = 0;                  // how long the put running now has taken (0: none)
  bool stalled = false;                   // one put has run for more than 2 s: new ones are dropped
};

// Set once an Engine::FetchAhead has run (or was dropped): the request may
// start and find locally what the remote tier had.
using AheadDone = std::shared_ptr<const std::atomic<bool>>;

// Where a prompt's stored prefix is, as a scheduler sees it (CaR III-B1's
// classes, in their order of priority): kPools, the reads a request starts
// with (those that do not depend on its queries: all rows for as-like, all
// keys for H2O, the probe heads' keys) would all come from the device or
// host pool; kNone, nothing stored (or less than one chunk): no transfer
// to speak of; kDisk, some of them would be read from disk.
enum class PrefixPlace { kPools, kNone, kDisk };
std::string_view PrefixPlaceName(PrefixPlace p);  // "pools", "none", "disk"

struct PrefixLocation {
  PrefixPlace place = PrefixPlace::kNone;
  size_t reusable_tokens = 0;  // of the prompt, a request would reuse now
  uint64_t disk_bytes = 0;     // what a prefetch would read from disk now
  // The pool entries its score events go to (car policy; empty otherwise).
  std::vector<uint64_t> score_keys;
};

// A scheduler's events for a request (CaR III-B3: +1 entering the window,
// +1 starting, -2 finishing; -1 leaving the window without starting).
enum class SchedulerEvent { kEnterWindow, kStart, kFinish, kLeaveWindow };

struct PrefetchResult {
  size_t reusable_tokens = 0;
  uint64_t disk_bytes_read = 0;
  double ms = 0;
};

// What a maintenance round did.
struct MaintainResult {
  uint32_t reordered_runs = 0;        // impress-ro: runs of chunks rewritten in importance order
  uint64_t reorder_bytes_written = 0;
};

struct ServeResult {
  std::vector<float> logits;
  size_t logits_rows = 0;
  RequestStats stats;
  // keep_kv: the request's K/V, to continue with Sequence::Step; null otherwise.
  std::shared_ptr<Sequence> sequence;
};

class Engine {
 public:
  // The model must outlive the engine. Opens (or creates) the store in
  // options.cache_dir, namespaced by the model's fingerprint.
  static Result<std::unique_ptr<Engine>> Open(const Model& model, EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Result<ServeResult> Serve(std::span<const int32_t> tokens, const ServeOptions& options = {});

  // What a scheduler asks before a request starts. Thread-safe, and safe
  // while other threads serve. Locate is a look: it hashes the prompt and
  // asks the pools where the entries are, reading nothing and counting no
  // access.
  PrefixLocation Locate(std::span<const int32_t> tokens, uint64_t cache_namespace = 0);
  // Locate's class of a request already served, from what its reads found
  // (no second lookup): kNone below one chunk reused, kDisk when a chunk
  // layer came from disk, else kPools.
  PrefixPlace PlaceServed(const RequestStats& stats) const;
  // Loads into the pools what a request for `tokens` reads before it knows
  // its queries (Locate's kPools afterwards, while the pools keep it). The
  // reads are verified as a request's are; one that fails is an error here
  // and a miss for the request.
  Result<PrefetchResult> Prefetch(std::span<const int32_t> tokens, uint64_t cache_namespace = 0);
  // Looks the remote tier up for what the local store lacks of `tokens` and
  // admits what it finds (whole chunks, into the disk tier and pools), on
  // the remote tier's ahead thread; returns at once. For a request that
  // will start later (a server's queue): its own lookup then finds the
  // chunks local, or waits for this fetch rather than fetching again. A
  // no-op without --remote and for a reader of important parts. Returns
  // what turns true when the fetch is over (done, failed or dropped), or
  // null when nothing was queued (the request's own lookup asks Redis).
  AheadDone FetchAhead(std::span<const int32_t> tokens, uint64_t cache_namespace = 0);
  // The score event for the entries `where` named (car policy; a no-op for
  // other policies).
  void OnSchedulerEvent(const PrefixLocation& where, SchedulerEvent event);

  // Measures the profiles the engine uses on `prompts` (profiling prompts,
  // run once per model) and saves them beside the store with the store's
  // fingerprint (another model's profile is never used): car's per-layer
  // attention sparsity (car-profile.json, turned into per-layer retention;
  // returned), and the probe threshold fitted per layer (alpha_auto,
  // probe-profile.json; see ProbeFits). An engine without a saved profile
  // profiles on its first request's prompt. InvalidArgument: no prompts,
  // or the engine uses no profile (UsesProfile).
  Result<std::vector<double>> Profile(std::span<const std::vector<int32_t>> prompts);
  bool UsesProfile() const;
  // Per layer, the fitted probe threshold and its recall (empty unless
  // alpha_auto and profiled).
  std::vector<ProbeFit> ProbeFits() const;

  // Background work, one round: for impress-ro and spec, KV reordering of the runs
  // whose importance the requests reported (IMPRESS 4.4.1: the paper runs it
  // every few minutes). Safe while requests run; a no-op for the others.
  // First, for every system with a store, checks that the cache directory
  // is still the one opened (store::ChunkStore::CheckDirectory); if not, the
  // round does nothing (StoreStatistics().directory_lost says why).
  Result<MaintainResult> Maintain();

  // Drops every stored prefix, from the disk tier (durably: not found after
  // a restart either) and so from the pools; requests running meanwhile
  // find their reads gone and recompute (a miss). The chunks dropped (0
  // for recompute).
  Result<uint64_t> Flush();

  const EngineOptions& options() const;
  // Bytes of records the disk tier holds for live chunks, without the
  // importance-ordered copies (the K/V once; 0 for recompute).
  uint64_t StoredBytes() const;
  // The remote tier's counters (zero without one), and a wait until the
  // chunks queued for it are written (tests, and a benchmark's writer
  // before a second process reads).
  RemoteStats RemoteStatistics() const;
  void DrainRemote();
  // The disk tier's counters and sizes (zeros for recompute). Thread-safe.
  store::StoreStats StoreStatistics() const;
  StoreBehindStats StoreBehindStatistics() const;
  // Waits until every prompt stored behind its request is written (tests,
  // benchmarks).
  void DrainStores();
  // The device and host pools' statistics (empty for recompute). Thread-safe.
  cache::CacheStats PoolStatistics() const;
  // The disk tier (null for recompute): tests and inspection.
  store::ChunkStore* TEST_store();

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tierkv::engine

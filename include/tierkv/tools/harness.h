// The measuring harness of `tierkv compare` and `tierkv bench`: several
// systems on identical requests, in one process.
//
// The request file's prefixes are stored once, by as-like requests (exact
// rows), in a scratch store every system reads; one unmeasured pass then
// reads every record once (the disk settles). Each round opens every system
// afresh with device and host pools sized as shares of the stored K/V, runs
// `warmup` unmeasured passes, one maintenance round (impress-ro, impress,
// spec: reordering), one unmeasured settling request (every system, so that
// none meets its first measured forward pass after seconds of idle or
// maintenance: on this project's machines such a pass ran up to 4x slower,
// docs/engine.md), then `repeat` measured passes; rounds alternate the
// systems' order (listed, reversed, ...), so that neither the disk's state
// nor the host's page cache favours a system.
//
// The quality pass (optional, unmeasured, after the rounds): every request
// served again by each system from cold pools and by recompute, with the
// next-token distributions of the query (and of each choice's tokens)
// returned: top-1 agreement and KL against recompute, the largest logit
// difference from as-like (fp16-KV reuse: at retention 1.0 every reusing
// system must match it exactly), and for requests with choices the task
// accuracy (each choice scored by the log-likelihood of its tokens after
// prefix + query, as lm-eval-harness does; the best one picked) against the
// label and against recompute's pick.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tierkv/engine.h"
#include "tierkv/model.h"
#include "tierkv/status.h"
#include "tierkv/tokenizer.h"
#include "tierkv/tools/task_workload.h"

namespace tierkv::bench {

// Recompute's logits and answers for a set of requests: what the quality
// pass compares every system with (src/bench/quality.cc).
struct QualityReference;
// An empty one, filled by the first quality pass that is given it.
std::shared_ptr<QualityReference> NewQualityReference();

struct HarnessOptions {
  std::vector<engine::System> systems;
  // Every option but system and pool sizes; cache_dir is the scratch store
  // (emptied first), retention the selective systems' share.
  engine::EngineOptions base;
  double device_share = 0.10, host_share = 0.30;  // of the stored K/V bytes
  double stored_share = 1.0;  // of each prefix stored before the systems run
  // Store whole chunks only (each prefix's stored part rounded down to a
  // multiple of chunk_tokens): as-like otherwise also reuses a prefix's
  // partial last chunk, which the selective systems compute, so the two
  // reuse different rows. The exactness check at retention 1.0 uses it.
  bool whole_chunks = false;
  // rounds 0: no timed rounds, the quality pass alone (it needs `quality`):
  // each system's figures are then the quality pass's, its engine opened
  // with empty pools.
  int warmup = 1, rounds = 2, repeat = 1;
  bool quality = false;
  // Decodes the greedy answers of requests with answers (generation tasks:
  // the quality pass generates them); needed only for such requests.
  const Tokenizer* tokenizer = nullptr;
  // The quality pass's reference: computed on first use and kept here, so
  // that runs on the same requests (a suite's runs on one workload: it
  // depends on the model and the requests only) compute it once. Null: the
  // run computes its own.
  std::shared_ptr<QualityReference> reference;
  // Called as work proceeds: what is running and how far (may be empty).
  std::function<void(const std::string& what, size_t done, size_t total)> progress;
  Status Validate() const;
  // `base` for system `sys`, with the pools sized as the shares of `stored`.
  engine::EngineOptions EngineFor(engine::System sys, uint64_t stored) const;
};

// The profiling prompts of an engine that uses profiles (car's sparsity,
// the fitted probe thresholds): the first kProfilingPrompts prefixes.
inline constexpr size_t kProfilingPrompts = 8;
std::vector<std::vector<int32_t>> ProfilingPrompts(std::span<const TaskRequest> reqs);
// A fitted probe profile as reports show it: per layer, threshold ("never":
// always all keys), recall, decided share.
nlohmann::json ProbeFitJson(const std::vector<engine::ProbeFit>& fits);

// Runs the systems (docs/bench.md lists the fields of the result):
// {"requests", "rounds", ..., "systems": {name: {"ttft_ms_mean", ...,
// "quality": {...}}}}. A system that fails stops the run with its name.
Result<nlohmann::json> RunHarness(const Model& model, std::span<const TaskRequest> reqs,
                                  const HarnessOptions& options);

}  // namespace tierkv::bench

// Where a needle is lost (issue #58): for each generation request whose
// expected strings appear in its prefix (make_tasks.py ruler's needles), the
// rank of the needle's tokens in the query's H2O importance, per layer, as
// the engine's selections see it: the shared set (all KV heads' scores
// summed, taken per token or in 64-token blocks: impress and spec, whose
// probe heads are every KV head on a 3-head model) and each head's own set
// (H2O's union: as-h2o, car). Computed through the model's KV hooks from
// the exact prefix K/V (fp32), so it says what selection would keep, not
// what a stored fp16 copy changes.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "tierkv/engine.h"
#include "tierkv/model.h"
#include "tierkv/tokenizer.h"
#include "tierkv/tools/task_workload.h"

namespace tierkv::bench {

struct NeedleStudyOptions {
  std::vector<double> retentions = {0.1, 0.25, 0.5};
  size_t block_tokens = 64;  // the engine's selection unit at retention <= 0.25 (docs/systems.md)
  engine::ScorePool score_pool;  // EngineOptions::score_pool: scores max-pooled first
};

// Per layer, over the requests whose needle was found in the prefix.
struct NeedleLayer {
  // The retention a selection needs to hold every needle token (the worst
  // token's rank / prefix rows), median over requests: shared set, per token.
  double needed_shared = 0;
  // Per retention: the share of requests whose needle tokens are all kept,
  // by the shared set per token, by the shared set in blocks, and by every
  // head's own set (a head that drops it reads the needle in no row).
  std::vector<double> kept_shared, kept_blocks, kept_every_head, kept_some_head;
};

struct NeedleStudy {
  // Requests with answers; those whose every expected string is in the
  // prefix exactly once (the others, such as cwe's and vt's, are skipped).
  int requests = 0, located = 0;
  std::vector<double> retentions;
  std::vector<NeedleLayer> layers;
  // Per depth label ("0.00".."1.00"): the share of (request, layer) pairs
  // whose needle the shared block set keeps at each retention.
  std::vector<std::pair<std::string, std::vector<double>>> by_depth;
};

Result<NeedleStudy> RunNeedleStudy(const Model& model, const Tokenizer& tok, std::span<const TaskRequest> reqs,
                                   const NeedleStudyOptions& options,
                                   const std::function<void(int, int)>& progress = {});

// A Markdown report of the study.
std::string NeedleStudyToMarkdown(const NeedleStudy& s);

}  // namespace tierkv::bench

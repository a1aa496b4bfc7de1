// Where a model's attention goes, measured the way the papers do (IMPRESS
// section 4.2, SPEC Observation III): prompts are split into a prefix and a
// 64-token query; the query's attention column sums over the prefix (H2O
// importance, through the engine's KV hooks) are the importance of each prefix
// token, per KV head (query heads of a GQA group summed, as the store selects
// per KV head).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "tierkv/model.h"

namespace tierkv::bench {

struct AttentionStudyOptions {
  int prompts = 50;
  int min_tokens = 2000;   // prompt length (capped by the context)
  int query_tokens = 64;   // the rows whose attention is summed
  int probe_heads = 3;
};

// Per layer, averaged over prompts.
struct LayerAttention {
  double top10_mass = 0;        // share of the prefix's attention on its top 10% keys, mean over heads
  double heads_jaccard10 = 0;   // mean pairwise Jaccard of the heads' top-10% sets
  double heads_jaccard40 = 0;   // ... top-40% sets
  double next_layer_jaccard25 = -1;  // top-25% of the layer's summed importance vs the next layer's; -1 for the last
  double probe_vs_all25 = 0;    // top-25% of the probe heads' summed importance vs all heads' summed
  double probe_vs_heads25 = 0;  // the probe set vs each head's own top-25% set, mean over heads
};

struct AttentionStudy {
  std::string model;
  int prompts = 0;
  int prompt_tokens = 0;
  int prefix_tokens = 0;
  int kv_heads = 0;
  int probe_heads = 0;
  std::vector<LayerAttention> layers;
};

// Prompts are `prompts` windows of the corpus at evenly spaced offsets, each
// starting with BOS. Errors: InvalidArgument if the corpus is shorter than
// one prompt or the options are out of range.
Result<AttentionStudy> RunAttentionStudy(const Model& model, const std::string& model_name,
                                         std::span<const int32_t> corpus, int32_t bos,
                                         const AttentionStudyOptions& options,
                                         const std::function<void(int, int)>& progress = {});

// A Markdown report: the per-layer table and the random-selection baselines.
std::string StudyToMarkdown(const AttentionStudy& s);
// Whitespace-separated columns for plotting: layer and the six measures.
std::string StudyToTable(const AttentionStudy& s);

}  // namespace tierkv::bench

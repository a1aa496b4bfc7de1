// H2O importance computed by the engine: the new tokens' attention weights
// over prefix keys, summed per key (column sums), one KV head at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tierkv/engine.h"
#include "tierkv/model.h"

namespace tierkv::engine {

// For each KV head h in [0, n): the column sums of the new tokens'
// attention over `rows` prefix keys (its query group summed), the keys fp16
// rows at keys + h * head_dim + j * stride elements. On the compute threads
// (one task per head): scoring every head reads all of R's keys, as much
// work as the attention.
std::vector<std::vector<float>> AllHeadScores(const LayerView& view, const ModelConfig& c, int n,
                                              const uint16_t* keys, size_t stride, size_t rows);

// What selection ranks by, from the scores AllHeadScores gives: max-pooled
// over EngineOptions::score_pool's window (select::MaxPoolWindow), and
// negated under EngineOptions::select_lowest (testing: the least important
// rows win). Unchanged when neither is set. Only the selective sources'
// choice of rows goes through it; profiles and reordering rank by the
// scores as computed.
void ForSelection(const EngineOptions& options, std::vector<std::vector<float>>* scores);

// The element-wise sum of per-head scores.
std::vector<float> SumScores(const std::vector<std::vector<float>>& scores, size_t rows);

}  // namespace tierkv::engine

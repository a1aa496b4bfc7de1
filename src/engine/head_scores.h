// H2O importance computed by the engine: the new tokens' attention weights
// over prefix keys, summed per key (column sums), one KV head at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tierkv/model.h"

namespace tierkv::engine {

// For each KV head h in [0, n): the column sums of the new tokens'
// attention over `rows` prefix keys (its query group summed), the keys fp16
// rows at keys + h * head_dim + j * stride elements. On the compute threads
// (one task per head): scoring every head reads all of R's keys, as much
// work as the attention.
std::vector<std::vector<float>> AllHeadScores(const LayerView& view, const ModelConfig& c, int n,
                                              const uint16_t* keys, size_t stride, size_t rows);

// EngineOptions::score_pool: each head's scores max-pooled over `radius`
// rows either side (select::MaxPool). A no-op at 0.
void PoolScores(uint32_t radius, std::vector<std::vector<float>>* scores);

// EngineOptions::select_lowest: negates every score, so that each top-k
// taken from them holds the least important rows. A no-op when !lowest.
void InvertIfLowest(bool lowest, std::vector<std::vector<float>>* scores);

// The element-wise sum of per-head scores.
std::vector<float> SumScores(const std::vector<std::vector<float>>& scores, size_t rows);

}  // namespace tierkv::engine

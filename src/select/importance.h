// Set arithmetic over token importance (H2O column sums): top-k selection,
// Jaccard similarity, attention mass. Used by the attention study now and by
// probe-head identification.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tierkv::select {

// ceil(fraction * n), at least 1 when n > 0.
size_t CountForFraction(size_t n, double fraction);

// Indices of the k largest scores, ties broken by the lower index, returned
// in ascending index order. k is clamped to scores.size().
std::vector<int32_t> TopK(std::span<const float> scores, size_t k);

// Selection by groups of rows that are read together (a 4 KiB page of the
// stored layout, or a block of consecutive tokens): group[j] is row j's
// group (dense ids). Groups are ranked by the sum of their rows' scores
// (ties by lower id) and taken whole until they hold at least k rows (at
// most one group's worth more). Rows ascending.
std::vector<int32_t> TopGroups(std::span<const float> scores, std::span<const uint32_t> group, size_t k);

// Each score replaced by the largest within `radius` positions either side
// (1D max pooling, as SnapKV smooths its votes): a row next to an important
// one ranks as high as it, so a selection keeps runs around what the query
// attends (a needle's value after the key the question names) rather than
// the attended tokens alone. radius 0: a copy.
std::vector<float> MaxPool(std::span<const float> scores, size_t radius);

// Each score replaced by the largest of the `before` positions before it,
// itself and the `after` positions after it. MaxPool(s, r) is
// MaxPoolWindow(s, r, r); MaxPoolWindow(s, n, 0) carries an attended row's
// score forward onto the n rows that follow it (what a key introduces).
std::vector<float> MaxPoolWindow(std::span<const float> scores, size_t before, size_t after);

// |a ∩ b| of two ascending index sets.
size_t IntersectionSize(std::span<const int32_t> a, std::span<const int32_t> b);

// |a ∩ b| / |a ∪ b| of two ascending index sets; 1 if both are empty.
double Jaccard(std::span<const int32_t> a, std::span<const int32_t> b);

// Mean Jaccard over all pairs of sets; 1 with fewer than two sets.
double MeanPairwiseJaccard(const std::vector<std::vector<int32_t>>& sets);

// The share of sum(scores) held by the k largest scores (0 if the sum is 0).
double TopMassFraction(std::span<const float> scores, size_t k);

// Expected Jaccard of two independent uniformly random subsets holding a
// fraction f of the same n items: f / (2 - f).
inline double RandomJaccard(double f) { return f / (2.0 - f); }

}  // namespace tierkv::select

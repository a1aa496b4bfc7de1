#include "select/importance.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tierkv::select {

size_t CountForFraction(size_t n, double fraction) {
  if (n == 0) return 0;
  const size_t k = static_cast<size_t>(std::ceil(fraction * static_cast<double>(n) - 1e-9));
  return std::clamp<size_t>(k, 1, n);
}

std::vector<int32_t> TopK(std::span<const float> scores, size_t k) {
  k = std::min(k, scores.size());
  std::vector<int32_t> idx(scores.size());
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [&](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  };
  std::nth_element(idx.begin(), idx.begin() + static_cast<ptrdiff_t>(k), idx.end(), better);
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::vector<float> MaxPool(std::span<const float> scores, size_t radius) {
  return MaxPoolWindow(scores, radius, radius);
}

std::vector<float> MaxPoolWindow(std::span<const float> scores, size_t before, size_t after) {
  const size_t n = scores.size();
  std::vector<float> out(scores.begin(), scores.end());
  if ((before == 0 && after == 0) || n == 0) return out;
  // A monotonic deque over the sliding window [j - before, j + after]: O(n)
  // whatever its width.
  std::vector<size_t> dq;
  dq.reserve(n);
  size_t head = 0, next = 0;
  for (size_t j = 0; j < n; ++j) {
    const size_t hi = std::min(n - 1, j + after);
    for (; next <= hi; ++next) {
      while (dq.size() > head && scores[dq.back()] <= scores[next]) dq.pop_back();
      dq.push_back(next);
    }
    const size_t lo = j >= before ? j - before : 0;
    while (dq[head] < lo) ++head;
    out[j] = scores[dq[head]];
  }
  return out;
}

std::vector<int32_t> TopGroups(std::span<const float> scores, std::span<const uint32_t> group, size_t k) {
  const size_t n = std::min(scores.size(), group.size());
  uint32_t groups = 0;
  for (size_t j = 0; j < n; ++j) groups = std::max(groups, group[j] + 1);
  std::vector<double> sum(groups, 0.0);
  std::vector<size_t> rows(groups, 0);
  for (size_t j = 0; j < n; ++j) {
    sum[group[j]] += scores[j];
    ++rows[group[j]];
  }
  std::vector<uint32_t> order(groups);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return sum[a] > sum[b] || (sum[a] == sum[b] && a < b); });
  std::vector<bool> take(groups, false);
  size_t taken = 0;
  for (size_t i = 0; i < order.size() && taken < k; ++i) {
    take[order[i]] = true;
    taken += rows[order[i]];
  }
  std::vector<int32_t> out;
  out.reserve(taken);
  for (size_t j = 0; j < n; ++j) {
    if (take[group[j]]) out.push_back(static_cast<int32_t>(j));
  }
  return out;
}

size_t IntersectionSize(std::span<const int32_t> a, std::span<const int32_t> b) {
  size_t i = 0, j = 0, inter = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] == b[j]) {
      ++inter, ++i, ++j;
    } else if (a[i] < b[j]) {
      ++i;
    } else {
      ++j;
    }
  }
  return inter;
}

double Jaccard(std::span<const int32_t> a, std::span<const int32_t> b) {
  if (a.empty() && b.empty()) return 1.0;
  const size_t inter = IntersectionSize(a, b);
  return static_cast<double>(inter) / static_cast<double>(a.size() + b.size() - inter);
}

double MeanPairwiseJaccard(const std::vector<std::vector<int32_t>>& sets) {
  if (sets.size() < 2) return 1.0;
  double sum = 0;
  int pairs = 0;
  for (size_t x = 0; x < sets.size(); ++x) {
    for (size_t y = x + 1; y < sets.size(); ++y) {
      sum += Jaccard(sets[x], sets[y]);
      ++pairs;
    }
  }
  return sum / pairs;
}

double TopMassFraction(std::span<const float> scores, size_t k) {
  double total = 0;
  for (float s : scores) total += s;
  if (total <= 0) return 0;
  double top = 0;
  for (int32_t i : TopK(scores, k)) top += scores[i];
  return top / total;
}

}  // namespace tierkv::select

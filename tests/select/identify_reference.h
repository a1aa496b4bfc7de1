// A brute-force reference for probe-head identification, written from the
// definitions (full stable sorts, std::set intersections, explicit vote
// counts) independently of src/select.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "select/identify.h"

namespace tierkv::select::testing {

using Scores = std::vector<std::vector<float>>;

inline std::vector<int32_t> RefTopK(const std::vector<float>& s, size_t k) {
  std::vector<int32_t> idx(s.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return s[a] > s[b]; });
  idx.resize(std::min(k, idx.size()));
  std::sort(idx.begin(), idx.end());
  return idx;
}

inline double RefJaccard(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::set<int32_t> sa(a.begin(), a.end()), sb(b.begin(), b.end()), u = sa;
  u.insert(sb.begin(), sb.end());
  size_t inter = 0;
  for (int32_t x : sa) inter += sb.count(x);
  return u.empty() ? 1.0 : static_cast<double>(inter) / static_cast<double>(u.size());
}

struct RefDecision {
  size_t k;
  std::vector<std::vector<int32_t>> sets;
  double jaccard, threshold;
  bool use;
  std::vector<int32_t> selected;
};

inline RefDecision Reference(const Scores& probes, double retention, double alpha, Aggregation agg) {
  RefDecision d;
  const size_t n = probes[0].size();
  d.k = std::max<size_t>(1, static_cast<size_t>(std::ceil(retention * n - 1e-9)));
  d.k = std::min(d.k, n);
  for (const auto& p : probes) d.sets.push_back(RefTopK(p, d.k));
  double sum = 0;
  int pairs = 0;
  for (size_t a = 0; a < d.sets.size(); ++a) {
    for (size_t b = a + 1; b < d.sets.size(); ++b) {
      sum += RefJaccard(d.sets[a], d.sets[b]);
      ++pairs;
    }
  }
  d.jaccard = pairs ? sum / pairs : 1.0;
  const double f = static_cast<double>(d.k) / n;
  d.threshold = std::pow(f / (2 - f), alpha);
  d.use = d.jaccard >= d.threshold;
  if (!d.use) return d;
  std::vector<float> total(n, 0.0f);
  for (const auto& p : probes) {
    for (size_t j = 0; j < n; ++j) total[j] += p[j];
  }
  if (agg == Aggregation::kSum) {
    d.selected = RefTopK(total, d.k);
  } else {
    std::map<int32_t, int> votes;
    for (const auto& s : d.sets) {
      for (int32_t j : s) ++votes[j];
    }
    std::vector<int32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) {
      const int va = votes.count(a) ? votes[a] : 0, vb = votes.count(b) ? votes[b] : 0;
      return va != vb ? va > vb : total[a] > total[b];
    });
    idx.resize(d.k);
    std::sort(idx.begin(), idx.end());
    d.selected = idx;
  }
  return d;
}

}  // namespace tierkv::select::testing

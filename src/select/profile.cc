#include "select/profile.h"

#include <algorithm>

namespace tierkv::select {

std::vector<double> LayerRetention(const std::vector<double>& sparsity, double retention) {
  const size_t L = sparsity.size();
  std::vector<double> density(L), out(L, 0.0);
  for (size_t l = 0; l < L; ++l) density[l] = std::max(1e-3, 1.0 - std::clamp(sparsity[l], 0.0, 1.0));
  std::vector<bool> full(L, false);
  // Water-filling: scale the open layers so that the mean is `retention`;
  // a layer that would pass 1 is capped, and the rest rescaled.
  for (size_t round = 0; round <= L; ++round) {
    double budget = retention * static_cast<double>(L), open_density = 0;
    for (size_t l = 0; l < L; ++l) {
      if (full[l]) {
        budget -= 1.0;
      } else {
        open_density += density[l];
      }
    }
    if (open_density <= 0) break;
    bool capped = false;
    for (size_t l = 0; l < L; ++l) {
      if (full[l]) continue;
      out[l] = std::max(0.0, budget) * density[l] / open_density;
      if (out[l] > 1.0) {
        out[l] = 1.0;
        full[l] = true;
        capped = true;
      }
    }
    if (!capped) break;
  }
  for (size_t l = 0; l < L; ++l) {
    if (full[l]) out[l] = 1.0;
  }
  return out;
}

}  // namespace tierkv::select

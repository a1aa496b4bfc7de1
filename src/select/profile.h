// CaR's quality-aware sparsification (III-D): a model's attention is sparser
// in some layers than in others (CaR's Figure 4: ~60% of the weights below 1%
// of their row's maximum in the first layer, ~95% in the last), so a layer
// whose attention is sparser keeps fewer rows. The profile (the measured
// sparsity per layer, from profiling prompts run once per model) becomes a
// retention per layer here.
#pragma once

#include <vector>

namespace tierkv::select {

// Per-layer retention whose mean is `retention` (when it can be: a layer
// keeps at most all of its rows), each layer's proportional to its density
// 1 - sparsity (at least 1e-3); the share a full layer cannot take is given
// to the others in the same proportion. Empty sparsity: empty result.
std::vector<double> LayerRetention(const std::vector<double>& sparsity, double retention);

}  // namespace tierkv::select

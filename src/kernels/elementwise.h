// Elementwise kernels of the forward pass.
#pragma once

namespace tierkv::kernels {

// gate[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + e^-x).
void SiluMul(float* gate, const float* up, int n);

}  // namespace tierkv::kernels

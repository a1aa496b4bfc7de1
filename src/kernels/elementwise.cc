#include "kernels/elementwise.h"

#include "kernels/simd_math.h"
#include "kernels/vec_math.h"

namespace tierkv::kernels {
namespace {

TIERKV_AVX2 void SiluMulAvx2(float* gate, const float* up, int n) {
  int i = 0;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + FastExp(-gate[i])) * up[i];
}

}  // namespace

void SiluMul(float* gate, const float* up, int n) {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2) return SiluMulAvx2(gate, up, n);
  for (int i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + FastExp(-gate[i])) * up[i];
}

}  // namespace tierkv::kernels

#include "kernels/matmul.h"

#include <cblas.h>

namespace tierkv::kernels {

void MatMulNT(int M, int N, int K, float alpha, const float* A, size_t lda, const float* B,
              size_t ldb, float beta, float* C, size_t ldc) {
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, alpha, A, static_cast<int>(lda),
              B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

void MatMulNN(int M, int N, int K, float alpha, const float* A, size_t lda, const float* B,
              size_t ldb, float beta, float* C, size_t ldc) {
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

void SetBlasThreads(int n) {
  if (n > 0) openblas_set_num_threads(n);
}
int GetBlasThreads() { return openblas_get_num_threads(); }
const char* BlasName() { return "OpenBLAS"; }

}  // namespace tierkv::kernels

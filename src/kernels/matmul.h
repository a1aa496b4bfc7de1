// Matrix products through BLAS (OpenBLAS; see docs/engine.md for the choice).
// All matrices are row-major with explicit leading dimensions.
#pragma once

#include <cstddef>

namespace tierkv::kernels {

// C[M×N] = alpha * A[M×K] · B[N×K]^T + beta * C. The weight layout: B rows
// are output features.
void MatMulNT(int M, int N, int K, float alpha, const float* A, size_t lda, const float* B,
              size_t ldb, float beta, float* C, size_t ldc);

// C[M×N] = alpha * A[M×K] · B[K×N] + beta * C.
void MatMulNN(int M, int N, int K, float alpha, const float* A, size_t lda, const float* B,
              size_t ldb, float beta, float* C, size_t ldc);

// Threads the BLAS library may use (0 leaves its default).
void SetBlasThreads(int n);
int GetBlasThreads();
const char* BlasName();

}  // namespace tierkv::kernels

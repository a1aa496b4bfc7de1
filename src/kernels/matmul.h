// Matrix products through oneDNN's sgemm (Debian's libdnnl; why not OpenBLAS:
// docs/engine.md). All matrices are row-major with explicit leading dimensions.
//
// Threading: the engine parallelises itself (ThreadPool::Compute), so each
// call runs on the calling thread only. oneDNN's own OpenMP threads are used
// just for the library-peak measurement (LibraryThreads).
#pragma once

#include <cstddef>
#include <functional>

namespace tierkv {
class ThreadPool;
}

namespace tierkv::kernels {

// C[M×N] = alpha * A[M×K] · B[N×K]^T + beta * C. The weight layout: B rows
// are output features.
void MatMulNT(int M, int N, int K, float alpha, const float* A, size_t lda, const float* B,
              size_t ldb, float beta, float* C, size_t ldc);

// C[M×N] = alpha * A[M×K] · B[K×N] + beta * C.
void MatMulNN(int M, int N, int K, float alpha, const float* A, size_t lda, const float* B,
              size_t ldb, float beta, float* C, size_t ldc);

// Splits N output columns into parts and runs f(n0, n) for each on the
// pool's threads and the caller, each part taken by whichever thread is free
// (model/weight_matrix.cc). Parts are multiples of 16 columns (the kernels'
// register tile), at least `min_part`, about N / (threads · per_thread):
// one part per thread suits sgemm, whose calls cost more when narrow; the
// in-type kernels take several per thread, so a thread that started late or
// runs slower does not leave the others waiting.
void ForColumnParts(ThreadPool* pool, int N, const std::function<void(int n0, int n)>& f, int min_part = 64,
                    int per_thread = 1);

// While alive, library calls from this thread may use `threads` threads of
// the library's own (OpenMP) pool. For measuring the library's peak only.
class LibraryThreads {
 public:
  explicit LibraryThreads(int threads);
  ~LibraryThreads();
};

const char* BlasName();

}  // namespace tierkv::kernels

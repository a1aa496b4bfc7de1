#include "kernels/matmul.h"

#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "util/thread_pool.h"

namespace tierkv::kernels {
namespace {

// Each thread that calls oneDNN asks for one OpenMP thread the first time:
// our compute threads already keep the cores busy, and OpenMP workers spinning
// beside them cost more than they give (docs/engine.md).
void OneLibraryThread() {
  thread_local const bool done = (omp_set_num_threads(1), true);
  (void)done;
}

void Check(dnnl_status_t s, const char* what) {
  if (s != dnnl_success) {
    // Only reachable through a programming error (bad dimensions).
    std::fprintf(stderr, "tierkv: fatal: dnnl_sgemm (%s) failed with status %d\n", what,
                 static_cast<int>(s));
    std::abort();
  }
}

}  // namespace

void MatMulNT(int M, int N, int K, float alpha, const float* A, size_t lda, const float* B,
              size_t ldb, float beta, float* C, size_t ldc) {
  if (M == 0 || N == 0) return;
  OneLibraryThread();
  Check(dnnl_sgemm('N', 'T', M, N, K, alpha, A, static_cast<dnnl_dim_t>(lda), B,
                   static_cast<dnnl_dim_t>(ldb), beta, C, static_cast<dnnl_dim_t>(ldc)),
        "NT");
}

void MatMulNN(int M, int N, int K, float alpha, const float* A, size_t lda, const float* B,
              size_t ldb, float beta, float* C, size_t ldc) {
  if (M == 0 || N == 0) return;
  OneLibraryThread();
  Check(dnnl_sgemm('N', 'N', M, N, K, alpha, A, static_cast<dnnl_dim_t>(lda), B,
                   static_cast<dnnl_dim_t>(ldb), beta, C, static_cast<dnnl_dim_t>(ldc)),
        "NN");
}

void ForColumnParts(ThreadPool* pool, int N, const std::function<void(int n0, int n)>& f, int min_part,
                    int per_thread) {
  const int parts = (pool->workers() + 1) * std::max(1, per_thread);
  const int per = std::max(min_part, (N / parts + 15) / 16 * 16);
  const int n_parts = (N + per - 1) / per;
  pool->ParallelFor(n_parts, [&](int p) {
    const int n0 = p * per;
    f(n0, std::min(per, N - n0));
  });
}

LibraryThreads::LibraryThreads(int threads) {
  OneLibraryThread();
  omp_set_num_threads(std::max(1, threads));
}
LibraryThreads::~LibraryThreads() { omp_set_num_threads(1); }

const char* BlasName() { return "oneDNN sgemm"; }

}  // namespace tierkv::kernels

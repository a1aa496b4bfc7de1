// The BLAS library's own sgemm on square n × n matrices, GFLOP/s of the best
// of `repeats` timings (each several calls long at small n), with the
// threads the caller's kernels::LibraryThreads grants: the peak that
// bench-engine's prefill and decode figures are read against.
#pragma once

namespace tierkv::bench {

double SgemmGflops(int n, int repeats);

}  // namespace tierkv::bench

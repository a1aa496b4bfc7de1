// One matrix product timed both ways, in the weights' type and by
// dequantize-then-sgemm: the product table of `bench-engine --decode` and
// the crossover calibration (tierkv/tools/crossover_calibration.h).
//
// Thread safety: the products run on the compute pool; call from one
// thread at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/weight_matrix.h"
#include "tierkv/status.h"
#include "tierkv/tools/decode_bench.h"
#include "util/huge_pages.h"

namespace tierkv::bench {

// 8192 × 8192: 64 M weights, 36-128 MiB in the types measured, far past the
// caches as a real model's matrices are in a decode step.
inline constexpr int kProductN = 8192, kProductK = 8192;

// The median (the upper one of an even count); 0 for none.
double Median(std::vector<double> v);

// kProductN rows of kProductK columns in one type: 64 quantized random rows,
// the rest copies of them (the timing reads every byte all the same), held
// as the model loader holds mapped weights (packed, or copied into huge
// pages where the kernel has them).
struct TypedMatrix {
  std::string type;
  std::string bytes;
  std::unique_ptr<HugePageBuffer> copy;
  model::WeightMatrix w;
};

// InvalidArgument for a type name without an in-type kernel.
Result<std::unique_ptr<TypedMatrix>> MakeProductMatrix(const std::string& type);

// M rows of activations times m, each path timed `repeats` + 2 times after
// a warm-up (in type first, then sgemm): medians, bandwidth, GFLOP/s.
ProductPoint MeasureProduct(const TypedMatrix& m, int M, int repeats);

}  // namespace tierkv::bench

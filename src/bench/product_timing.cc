#include "bench/product_timing.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "model/quant.h"
#include "model/quant_dot.h"
#include "tierkv/elapsed.h"
#include "util/thread_pool.h"

namespace tierkv::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ProductSeconds(const model::WeightMatrix& w, model::WeightMatrix::Path path, int M, int repeats) {
  std::vector<float> A(static_cast<size_t>(M) * w.cols(), 0.5f), C(static_cast<size_t>(M) * w.rows());
  ThreadPool* pool = ThreadPool::Compute();
  w.MatMulBy(path, pool, M, A.data(), w.cols(), 0, w.rows(), 0.f, C.data(), w.rows());  // warm-up
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    w.MatMulBy(path, pool, M, A.data(), w.cols(), 0, w.rows(), 0.f, C.data(), w.rows());
    t.push_back(SecondsSince(t0));
  }
  return Median(t);
}

}  // namespace

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

Result<std::unique_ptr<TypedMatrix>> MakeProductMatrix(const std::string& type) {
  ASSIGN_OR_RETURN(model::GgmlType t, model::ParseGgmlType(type));
  if (model::ActivationFormat(t) == model::ActFormat::kNone) {
    return Status::InvalidArgument("product type " + type + " has no in-type kernel");
  }
  auto m = std::make_unique<TypedMatrix>();
  m->type = type;
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.f, 0.05f);
  std::vector<float> row(kProductK);
  std::string first;
  for (int r = 0; r < 64; ++r) {
    for (float& x : row) x = d(rng);
    model::QuantizeRow(t, row.data(), kProductK, &first);
  }
  m->bytes.reserve(first.size() * (kProductN / 64));
  for (int r = 0; r < kProductN; r += 64) m->bytes += first;
  RETURN_IF_ERROR(m->w.AppendInPlace(t, reinterpret_cast<const uint8_t*>(m->bytes.data()), kProductN, kProductK));
  m->w.PackForProducts();
  ASSIGN_OR_RETURN(m->copy, model::MoveRowsToHugePages({&m->w}, /*release_rows=*/false));
  return m;
}

ProductPoint MeasureProduct(const TypedMatrix& m, int M, int repeats) {
  ProductPoint p;
  p.type = m.type;
  p.in_type_max_rows = m.w.parts()[0].max_rows_in_type;
  p.rows = M;
  p.in_type_ms = ProductSeconds(m.w, model::WeightMatrix::Path::kInType, M, repeats + 2) * 1e3;
  p.dequantize_ms = ProductSeconds(m.w, model::WeightMatrix::Path::kDequantize, M, repeats + 2) * 1e3;
  const double bytes = static_cast<double>(m.w.bytes());
  const double flops = 2.0 * M * kProductN * kProductK;
  p.in_type_gbps = bytes / p.in_type_ms / 1e6;
  p.dequantize_gbps = bytes / p.dequantize_ms / 1e6;
  p.in_type_gflops = flops / p.in_type_ms / 1e6;
  p.dequantize_gflops = flops / p.dequantize_ms / 1e6;
  return p;
}

}  // namespace tierkv::bench

// Throughput of the forward pass next to the BLAS library's own sgemm peak,
// measured in the same run ("bench-engine").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tierkv/model.h"
#include "tierkv/status.h"

namespace tierkv::bench {

struct EngineBenchOptions {
  std::vector<int> batch_sizes = {64, 256, 512, 1024, 2048};
  int repeats = 5;  // rounds; each measurement keeps its best
  std::vector<int> sgemm_sizes = {256, 512, 1024, 2048};
  // The side kernels: (queries, prefix rows) as a request with a 2,700-token
  // prefix and a 45-token query sees them (a quarter of R, all of R).
  std::vector<std::pair<int, int>> kernel_shapes = {{45, 675}, {45, 2700}};
};

struct SgemmPoint {
  int n = 0;
  double gflops = 0;
};

struct PrefillPoint {
  int tokens = 0;
  double ms = 0;
  double tokens_per_s = 0;
  double gflop = 0;   // matrix work of the prefill (projections, attention, classifier)
  double gflops = 0;  // gflop / wall time of the whole prefill
  double fraction_of_peak = 0;
};

// The engine's side kernels on stored fp16 rows, every KV head of a layer
// fanned out over the compute threads as the engine does: "attention" (the
// new tokens' attention over prefix rows, with values) and "scoring"
// (weights and column sums only: H2O and probe scoring). FLOPs count the
// products with the prefix rows: 4·q·g·rows·d per KV head with values,
// 2·q·g·rows·d without.
struct KernelPoint {
  std::string kernel;  // "attention" or "scoring"
  int queries = 0;     // new tokens
  int rows = 0;        // prefix rows per KV head
  double ms = 0;       // one layer (every KV head)
  double gflops = 0;
  double fraction_of_peak = 0;
};

// llama.cpp's prefill on the same file (tools/llamacpp/runner.py prefill):
// its throughput per batch size and its process's resident size.
struct LlamaCppPrefill {
  std::string tool;
  int threads = 0;
  int batch_size = 0;  // llama.cpp's ubatch: a longer prefill runs in batches of it
  std::vector<PrefillPoint> prefill;  // tokens, ms, tokens_per_s
  uint64_t resident_before_model = 0, resident_after_load = 0, resident_after_context = 0, resident_after_prefill = 0;
};
// InvalidArgument naming the field that is missing or of the wrong type.
Result<LlamaCppPrefill> ReadLlamaCppPrefill(const std::string& path);

struct EngineBenchReport {
  std::string model;
  // This process's resident size (bytes) before the model was loaded, after,
  // and after the first prefill of each size; 0 where not measured.
  uint64_t resident_before_load = 0, resident_after_load = 0, resident_after_prefill = 0;
  std::optional<LlamaCppPrefill> llamacpp;
  std::string blas;
  int blas_threads = 0;
  double peak_gflops = 0;  // best sgemm of sgemm_sizes
  std::vector<SgemmPoint> sgemm;
  std::vector<PrefillPoint> prefill;
  std::vector<KernelPoint> kernels;
};

// FLOPs of the matrix products of one prefill of T tokens from position 0,
// logits for the last token only. Attention counts the causal products.
double PrefillMatmulFlops(const ModelConfig& c, int T);

Result<EngineBenchReport> RunEngineBench(const Model& model, const std::string& model_name,
                                         const EngineBenchOptions& options);

std::string ReportToJson(const EngineBenchReport& r);
std::string ReportToText(const EngineBenchReport& r);

}  // namespace tierkv::bench

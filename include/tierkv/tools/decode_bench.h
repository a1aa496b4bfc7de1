// Decode and short-batch speed ("bench-engine --decode"): tokens/s of one
// sequence after a P-token prompt and of B sequences stepped together (the
// scheduler's batched decode), next to the floor the memory bandwidth sets
// (weight bytes per pass / measured read bandwidth); and the matrix products
// per weight type at M rows, in the weights' type and by
// dequantize-then-sgemm, as bandwidth and as a share of the sgemm peak.
#pragma once

#include <string>
#include <vector>

#include "tierkv/model.h"
#include "tierkv/status.h"

namespace tierkv::bench {

struct DecodeBenchOptions {
  int prompt_tokens = 128;            // P: the context the decode attends to
  int decode_tokens = 64;             // steps timed per round
  std::vector<int> batches = {1, 4, 8};  // sequences stepped together
  std::vector<int> product_rows = {1, 4, 16, 64};  // M of the product table
  std::vector<std::string> product_types = {"Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "F16", "BF16"};
  int repeats = 3;  // rounds; medians are reported
};

struct DecodePoint {
  int batch = 0;               // sequences stepped together
  double tokens_per_s = 0;     // all sequences' tokens / wall time (median round)
  double ms_per_step = 0;      // one pass over the batch
};

struct ProductPoint {
  std::string type;
  int rows = 0;       // M: activation rows
  int in_type_max_rows = 0;  // MatMul multiplies in type up to this M
  double in_type_ms = 0, dequantize_ms = 0;
  double in_type_gbps = 0, dequantize_gbps = 0;       // weight bytes read / time
  double in_type_gflops = 0, dequantize_gflops = 0;   // 2·M·N·K / time
  // In type is no slower here (the table's "faster", the calibration's rule).
  bool in_type_wins() const { return in_type_ms <= dequantize_ms; }
};

struct DecodeBenchReport {
  std::string model;
  std::string kernels;      // the in-type kernels' instruction set ("avx2", "portable")
  int threads = 0;
  int prompt_tokens = 0;
  double weight_bytes = 0;  // read per pass (every matrix, the output one included)
  double read_gbps = 0;     // measured read bandwidth, all threads
  double floor_tokens_per_s = 0;  // read_gbps / weight_bytes: one sequence's ceiling
  double peak_gflops = 0;   // sgemm's, all threads
  std::vector<DecodePoint> decode;
  int product_n = 0, product_k = 0;  // the product table's matrix: N output rows of K
  std::vector<ProductPoint> products;
};

Result<DecodeBenchReport> RunDecodeBench(const Model& model, const std::string& model_name,
                                         const DecodeBenchOptions& options);

std::string DecodeReportToText(const DecodeBenchReport& r);
std::string DecodeReportToJson(const DecodeBenchReport& r);

}  // namespace tierkv::bench

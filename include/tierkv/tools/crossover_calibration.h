// The crossover between in-type products and dequantize-then-sgemm,
// measured on this machine (`tierkv bench-engine --calibrate FILE`): per
// weight type, an 8192 × 8192 product timed both ways at a ladder of row
// counts, and the most rows at which the in-type kernel is still no slower,
// saved as a crossover file that `--crossover FILE` (UseCrossoverFile,
// tierkv/model.h) makes every product follow.
//
// The rule per type, rows ascending: in type wins at M when its median time
// is at most sgemm's; the limit is the largest M won before sgemm wins two
// ladder points in a row (one loss in between is taken for noise), 0 when
// sgemm wins the first two. Where in type wins at the top of the ladder the
// limit is that top (the report says so: more rows were not tried). Types
// whose rows are packed on this CPU (Q4_K and Q8_0 with AVX-512 VNNI,
// model/quant_pack.h) multiply in type at every length whatever a file
// says: they are not measured, nor written.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tierkv/status.h"
#include "tierkv/tools/decode_bench.h"

namespace tierkv::bench {

struct CalibrateOptions {
  std::vector<std::string> types = {"Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "F16", "BF16"};
  // Ascending, each in [1, 4096].
  std::vector<int> rows = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512};
  int repeats = 3;  // timings per path and point: repeats + 2 (in type, then sgemm), medians
  std::function<void(const std::string&)> progress;  // a line per point timed; may be empty
};

struct CalibrateReport {
  std::string cpu, kernels;  // where it was measured (the file's identity)
  int product_n = 0, product_k = 0;
  std::vector<ProductPoint> products;  // every point timed, in order
  struct Limit {
    std::string type;
    int max_rows = 0;
    bool at_top = false;  // in type still won at the ladder's last point
    bool packed = false;  // packed on this CPU: in type at every length, not measured
  };
  std::vector<Limit> limits;
  std::string file_text;  // the crossover file's contents
};

// InvalidArgument for a type without an in-type kernel or named twice, or a
// ladder that is empty, not ascending or out of range.
Result<CalibrateReport> CalibrateCrossover(const CalibrateOptions& options);
// Whether `path` can be written, checked before minutes of measuring rather
// than after: it is missing or a regular file (not a directory, device or
// symbolic link, which the atomic rename would replace), and a file can be
// created beside it (path + ".tmp", removed again).
Status CheckCrossoverPath(const std::string& path);
// Writes report.file_text to `path` atomically (a crash leaves the old file
// or the new one).
Status SaveCrossover(const CalibrateReport& report, const std::string& path);
std::string CalibrateReportToText(const CalibrateReport& r);
std::string CalibrateReportToJson(const CalibrateReport& r);

}  // namespace tierkv::bench

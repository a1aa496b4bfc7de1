// The disk tier's read path ("bench-io"): O_DIRECT reads of real
// chunk records through ChunkStore::Read (checksums verified), per chunk size,
// backend and queue depth, each next to the device's sequential read ceiling
// measured right before and right after it (a virtual disk's rate drifts
// within one run, so one ceiling for the whole run is not a fair yardstick).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tierkv/status.h"

namespace tierkv::bench {

struct IoBenchOptions {
  std::string dir;  // scratch directory on the disk to measure (must support O_DIRECT)
  uint16_t layers = 8;        // the default model: 8 layers,
  uint32_t row_bytes = 512;   // 16 KV heads x 16 dims x fp16
  std::vector<int> chunk_tokens = {16, 32, 64, 128};
  std::vector<std::string> backends = {"uring", "pread"};
  std::vector<int> depths = {1, 2, 4, 8, 16, 32, 64};
  uint64_t data_mib = 256;   // records written per chunk size
  uint64_t read_mib = 64;    // bytes read per measured point
  std::function<void(const std::string&)> progress;
};

struct IoPoint {
  int chunk_tokens = 0;
  uint64_t record_bytes = 0;  // one chunk layer on disk (header + K + V pages)
  std::string backend;
  int depth = 0;
  double mb_per_s = 0;        // record bytes read per second (1 MB = 10^6 bytes)
  double reads_per_s = 0;
  double ceiling_before = 0, ceiling_after = 0;  // sequential MB/s around this point
  double fraction_of_ceiling = 0;  // of the mean of the two
};

struct IoBenchReport {
  std::string dir;
  double ceiling_min = 0, ceiling_max = 0;  // over every measurement of the run
  std::vector<IoPoint> points;
};

Result<IoBenchReport> RunIoBench(const IoBenchOptions& options);

// The read planner's cost model (bench-io --calibrate): measured in a cache
// directory with the store's backend and queue depth and saved there as
// IO-MODEL, where the store finds it (it measures by itself only when the
// file is missing or from another machine).
struct IoModelReport {
  std::string dir;
  std::string machine;      // host, device, backend, depth
  double per_io_us = 0;     // fixed cost of one read at that depth
  double mb_per_s = 0;      // bandwidth at that depth
  uint32_t merge_gap_blocks = 0;  // --read-planner model reads through gaps up to this many 4 KiB blocks
};
Result<IoModelReport> CalibrateCacheDir(const std::string& dir, const std::string& backend,
                                        uint32_t queue_depth,
                                        std::function<void(const std::string&)> progress = {});
std::string IoModelReportToJson(const IoModelReport& r);
std::string IoModelReportToText(const IoModelReport& r);
std::string IoReportToJson(const IoBenchReport& r);
std::string IoReportToText(const IoBenchReport& r);

}  // namespace tierkv::bench

// A cache directory as its owner sees it, without a model: `tierkv inspect`.
// Opening is read-only and takes no lock (safe beside a running process);
// the store's recovery verifies every record it indexes.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tierkv/status.h"

namespace tierkv::store {

struct StoreReport {
  std::string dir, model;  // model: the human-readable line of the STORE file
  uint64_t fingerprint = 0;
  uint32_t chunk_tokens = 0, layers = 0, row_bytes = 0, probe_bytes = 0;
  std::string dtype;  // f16 or f32
  uint64_t nodes = 0, chunks = 0, live_bytes = 0, dead_bytes = 0;
  uint64_t skipped_records = 0, recovery_us = 0;
  uint64_t manifest_chunks = 0, manifest_errors = 0, scanned_segments = 0;
  bool manifest_present = false;
  std::vector<std::pair<std::string, uint64_t>> segments;  // file name, bytes; sorted
};

// NotFound: not a cache directory; InvalidArgument: a damaged identity file
// or a directory the store refuses, naming the field or file.
Result<StoreReport> InspectStore(const std::string& dir);

}  // namespace tierkv::store

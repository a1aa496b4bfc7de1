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

// How the disk tier does its I/O: the store-facing options a command line
// sets, kept in EngineOptions::disk and copied whole into StoreOptions::disk.
struct DiskOptions {
  // auto (io_uring where the kernel allows it, else pread), uring or
  // pread; the store refuses anything else.
  std::string io_backend = "auto";
  // Open record files with O_DIRECT (off only for file systems without it,
  // such as tmpfs before Linux 6.6).
  bool direct_io = true;
  // Selective reads read through gaps between needed pages that the cost
  // model (IO-MODEL) says are cheaper to read than to skip (fewer, larger
  // reads); false (the default): only the needed pages, adjacent ones
  // merged. Off by default because on the disks measured it read ~10% more
  // bytes for no measurable gain in the layers' wait (docs/systems.md,
  // "Read efficiency, part 2").
  bool merge_read_gaps = false;
  // The read planner's cost model: the directory's IO-MODEL when it was
  // measured on this machine, else measured at open (a fraction of a
  // second: docs/store.md) and saved. false, a read-only open or a file
  // system other than the default: the saved model if any, else the
  // built-in default. The planner picks a reordered copy or the chunks' own
  // records by this model's time.
  bool calibrate_io = true;
};

// DiskOptions::io_backend's names: `name` when it is one of them (auto,
// uring, pread), else InvalidArgument listing them.
Result<std::string> ParseIoBackend(std::string_view name);

// A store's counters and sizes (ChunkStore::stats()).
struct StoreStats {
  uint64_t records_written = 0, bytes_written = 0, puts = 0;
  uint64_t records_read = 0, bytes_read = 0;
  uint64_t corrupt_records = 0, read_errors = 0;
  uint64_t evicted_chunks = 0, dropped_chunks = 0;  // budget evictions; dropped for corruption
  uint64_t recovered_chunks = 0, skipped_records = 0, recovery_us = 0;
  uint64_t recovered_runs = 0;  // reordered runs the manifest brought back
  uint64_t manifest_chunks = 0;      // of the recovered, how many came from the manifest
  uint64_t manifest_errors = 0;      // a damaged manifest (recovery then scanned every segment)
  uint64_t scanned_segments = 0;     // segments recovery read record by record
  uint64_t compactions = 0, compacted_segments = 0, compacted_records = 0, reclaimed_bytes = 0;
  uint64_t row_reads = 0, pages_read = 0, reordered_records_read = 0;
  uint64_t probe_reads = 0, probe_fallbacks = 0;  // probe keys read; of them, sliced from K
  uint64_t reorders = 0, reordered_runs_dropped = 0;
  uint64_t live_chunks = 0, live_bytes = 0, dead_bytes = 0, segments = 0, nodes = 0;
  uint64_t reordered_chunks = 0, reordered_bytes = 0;  // live reordered copies (in live_bytes)
  // Puts that met a full file system and tried again after evicting and
  // compacting; Puts that failed (nothing stored: a miss), for want of
  // space or any other error.
  uint64_t nospace_retries = 0, put_failures = 0;
  // The bound on the segment files' bytes (live + dead; 0: unlimited):
  // StoreOptions' disk_budget_bytes + max_dead_bytes.
  uint64_t budget_bytes = 0;
  uint64_t removed_segments = 0;  // segments recovery deleted for holding no live record
  // The cache directory was removed or replaced while the store had it open
  // (its LOCK no longer at its path): the store stopped writing for good
  // (Put fails; reads of what it indexed go on from its open files).
  bool directory_lost = false;
};

// A record that failed verification.
struct DamagedRecord {
  std::string segment;  // file name, e.g. seg-000003.tkv
  uint64_t offset = 0;  // bytes into the segment
  std::string kind;     // "kv" or "probe"
  uint32_t chunk = 0;
  uint16_t layer = 0;
  std::string error;
};

// What reading every record of every live chunk found.
struct VerifyReport {
  uint64_t records = 0, bytes = 0;     // read and checked
  std::vector<DamagedRecord> damaged;  // by segment, then offset
  uint64_t dropped_chunks = 0;         // repair: chunks that left the index (with their descendants)
  bool repaired = false;               // repair: the index without them is durable (a new manifest)
};

struct StoreReport {
  std::string dir, model;  // model: the human-readable line of the STORE file
  uint64_t fingerprint = 0;
  uint32_t chunk_tokens = 0, layers = 0, row_bytes = 0, probe_bytes = 0;
  std::string dtype;  // f16 or f32
  StoreStats stats;  // after a read-only recovery
  bool manifest_present = false;
  std::vector<std::pair<std::string, uint64_t>> segments;  // file name, bytes; sorted
  std::vector<uint64_t> segment_live_bytes;  // of each of `segments`: bytes of live records in it
  bool verified = false;
  VerifyReport verify;  // when verified
  // The read planner's cost model (IO-MODEL): "saved" when measured on this
  // machine (bench-io --calibrate, or the first open that may write),
  // "measured" (a repair open that measured it), else "default".
  std::string io_source;
  double io_per_io_us = 0, io_mb_per_s = 0;
  uint32_t io_merge_gap_blocks = 0;
};

// The files a store's owner keeps beside it (tolerated, never touched):
// the engine's, for tools that open a cache directory without an engine.
struct InspectOptions {
  std::vector<std::string> owner_files;
  bool verify = true;   // read every record of every live chunk
  bool repair = false;  // verify, then drop the damaged chunks durably (opens for writing)
};

// NotFound: not a cache directory; InvalidArgument: a damaged identity file
// or a directory the store refuses, naming the field or file; Unavailable:
// repair while another process holds the directory.
Result<StoreReport> InspectStore(const std::string& dir, const InspectOptions& options = {});

}  // namespace tierkv::store

// The manifest: a checksummed snapshot of the disk tier's index, so that a
// restart reads one file plus the segments written since instead of every
// segment. The segments after the snapshot are its log: records are
// self-describing, so recovery scans segments numbered >= log_from exactly as
// it scans all of them without a manifest.
//
// Written atomically (temporary file, sync, rename, sync of the directory) at
// a clean close, after compaction, and by ChunkStore::Checkpoint. The active
// segment is sealed first, so a manifest always covers whole segments.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tierkv/status.h"

namespace tierkv::store {

inline constexpr char kManifestMagic[8] = {'T', 'K', 'V', 'M', 'A', 'N', '0', '1'};
// 3: reordered runs (importance-ordered copies) are in the snapshot too.
// Version 2 files (no runs) are still read.
inline constexpr uint32_t kManifestVersion = 3;

struct ManifestChunk {
  uint64_t prefix_hash = 0, parent_hash = 0;
  uint32_t first_token = 0;
  std::vector<int32_t> tokens;
  // Per layer: segment number and 4 KiB block of the record.
  std::vector<std::pair<uint32_t, uint32_t>> where;
  // The probe records: layer l at block probe_block + l * probe_stride of
  // layer 0's segment; probe_block UINT32_MAX: none.
  uint32_t probe_block = UINT32_MAX;
  uint16_t probe_stride = 0;
  // Version 3: the page checksums of its K/V records, layer-major (pages
  // per record each), as the store knew them (HeaderCache); empty: not
  // known (the headers are read on first use).
  uint32_t pages = 0;
  std::vector<uint64_t> page_checksums;
};

// A reordered run (record_check.h's Run) as the snapshot keeps it: its
// chunks by prefix hash, its records per layer, and per layer each row's
// slot (the mapping list).
struct ManifestRun {
  uint32_t first_token = 0, rows = 0, records = 0;
  uint64_t end_hash = 0, parent_hash = 0;
  std::vector<uint64_t> hashes;                              // its chunks, in order
  std::vector<std::pair<uint32_t, uint32_t>> where;          // layer-major: segment, block
  std::vector<uint16_t> slot_of;                             // layer-major: rows per layer
};

struct Manifest {
  uint64_t fingerprint = 0;
  uint32_t chunk_tokens = 0;
  uint16_t layers = 0;
  uint32_t log_from = 1;   // segments numbered >= this were written after the snapshot
  uint64_t sequence = 0;   // the highest record sequence number so far
  std::vector<uint32_t> segments;  // the segments below log_from that the snapshot uses
  std::vector<ManifestChunk> chunks;
  std::vector<ManifestRun> runs;
};

std::string EncodeManifest(const Manifest& m);
// Corruption (naming what is wrong) for a damaged or truncated manifest.
Result<Manifest> DecodeManifest(const std::string& bytes);

}  // namespace tierkv::store

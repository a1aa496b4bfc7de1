// Recovery's plan: what the manifest and the segments written after it
// hold, chunk by chunk (by prefix hash). Built first, then applied: the
// chunks whose every layer is present and whose whole prefix chain is
// usable enter the index; anything else (torn tail, orphan, foreign record,
// a hash collision) is skipped and counted.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "store/manifest.h"
#include <vector>

#include "store/chunk_table.h"

namespace tierkv::store {

struct FoundChunk {
  uint32_t first_token = 0, tokens = 0;
  uint64_t parent_hash = 0;
  std::vector<int32_t> token_ids;
  std::vector<ChunkStore::Location> where, probe;  // per layer: K/V and probe records
  std::vector<uint64_t> seq, probe_seq;            // the newest copy of each wins
  bool init = false, consistent = true;
  Placed placed;  // where the chunk's records are, once usable
};

struct RecoveryPlan {
  std::vector<uint32_t> segments;  // every segment file, ascending
  std::vector<uint32_t> garbage;   // below the snapshot and not used by it
  std::vector<uint32_t> used;      // of the snapshot's segments, those that exist
  uint32_t log_from = 1;           // segments from here on are scanned
  uint64_t sequence = 0;           // the highest record sequence seen
  uint64_t skipped = 0, total_bytes = 0, scanned = 0;
  uint64_t manifest_chunks = 0, manifest_errors = 0;
  std::unordered_map<uint64_t, FoundChunk> found;
  std::vector<ManifestRun> runs;  // the snapshot's reordered runs
  // The snapshot's chunks whose K/V page checksums it kept: by prefix hash,
  // their locations and checksums (HeaderCache, for records still there).
  struct KnownPages {
    std::vector<ChunkStore::Location> where;
    uint32_t pages = 0;
    std::vector<uint64_t> sums;
  };
  std::unordered_map<uint64_t, KnownPages> known_pages;
};

// Whether a found chunk has every layer and a consistent identity.
bool Complete(const FoundChunk& f);
// The usable chunks (their chain to the root is complete, chunk-aligned):
// hash -> true. `chunk_tokens`: the store's chunk size.
std::unordered_map<uint64_t, bool> UsableChunks(const RecoveryPlan& plan, uint32_t chunk_tokens);
// Uses a chunk's probe copy when every layer's is there, in layer 0's
// segment, at a constant stride (as Put and compaction write them);
// otherwise its probe keys are sliced from its K records.
void PlaceProbes(FoundChunk* f, uint16_t layers, bool probes);

}  // namespace tierkv::store

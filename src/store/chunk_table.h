// The store's per-chunk tables beside the radix tree, by chunk id: where a
// chunk's records are, where its probe records are, its tokens, and its
// value for eviction. Not thread-safe: the store guards it with its index
// lock.
//
// Put and compaction write a chunk's layers back to back in one segment, so
// one Location (layer 0's) per chunk is enough; chunks whose layers recovery
// found scattered keep a full list. The probe records of a chunk are in the
// segment of its layer-0 K/V, layer l at probe_block + l * probe_stride.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "store/chunk_store.h"

namespace tierkv::store {

// Where a new chunk's records are: K/V per layer and its probe records
// (layer l at probe_block + l * probe_stride in layer 0's segment;
// probe_block kNoProbe: none).
struct Placed {
  std::vector<ChunkStore::Location> where;
  uint32_t probe_block = UINT32_MAX;
  uint16_t probe_stride = 0;
};

class ChunkTable {
 public:
  using Location = ChunkStore::Location;
  static constexpr uint32_t kNoProbe = UINT32_MAX;

  ChunkTable(uint16_t layers, uint32_t row_bytes, uint32_t eviction_half_life)
      : layers_(layers), row_bytes_(row_bytes), half_life_(eviction_half_life) {}

  // A chunk enters: its tokens, K/V locations (one per layer) and probe records.
  void Add(uint32_t chunk, uint16_t tokens, std::span<const Location> where, uint32_t probe_block,
           uint16_t probe_stride);
  // A chunk leaves (its id may be reused).
  void Clear(uint32_t chunk);

  // The rest is about chunks already added (their entries exist).
  Location LocationOf(uint32_t chunk, uint16_t layer) const;
  std::vector<Location> LocationsOf(uint32_t chunk) const;
  void SetLocations(uint32_t chunk, std::span<const Location> where);
  // Segment 0: no probe records.
  Location ProbeLocationOf(uint32_t chunk, uint16_t layer) const;
  bool HasProbes(uint32_t chunk) const;
  void SetProbes(uint32_t chunk, uint32_t probe_block, uint16_t probe_stride);
  void ClearProbes(uint32_t chunk) { SetProbes(chunk, kNoProbe, ProbeStride(chunk)); }
  uint32_t ProbeBlock(uint32_t chunk) const { return chunk < probe_block_.size() ? probe_block_[chunk] : kNoProbe; }
  uint16_t ProbeStride(uint32_t chunk) const { return chunk < probe_stride_.size() ? probe_stride_[chunk] : 0; }
  uint16_t Tokens(uint32_t chunk) const { return chunk_tokens_[chunk]; }

  // An access: the chunk's value for eviction is log2 of an access count
  // that halves every eviction_half_life accesses (0: pure recency).
  void Touch(uint32_t chunk);
  double Value(uint32_t chunk) const { return value_[chunk]; }

 private:
  // Blocks of one of the chunk's K/V records.
  uint32_t RecordBlocks(uint32_t chunk) const;
  void Grow(uint32_t chunk);

  const uint16_t layers_;
  const uint32_t row_bytes_;
  const uint32_t half_life_;
  std::vector<Location> first_location_;
  std::unordered_map<uint32_t, std::vector<Location>> scattered_;
  std::vector<uint32_t> probe_block_;  // kNoProbe: none
  std::vector<uint16_t> probe_stride_;
  std::vector<double> value_;
  std::vector<uint16_t> chunk_tokens_;
  uint64_t clock_ = 0;  // accesses so far

 public:
  // Bytes per chunk of the tables above (scattered_ aside: only chunks
  // recovery found scattered), from their element types.
  static constexpr size_t kBytesPerChunk =
      sizeof(decltype(first_location_)::value_type) + sizeof(decltype(probe_block_)::value_type) +
      sizeof(decltype(probe_stride_)::value_type) + sizeof(decltype(value_)::value_type) +
      sizeof(decltype(chunk_tokens_)::value_type);
};

}  // namespace tierkv::store

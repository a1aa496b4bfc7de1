#include "store/chunk_table.h"

#include <cmath>

#include "store/format.h"

namespace tierkv::store {

uint32_t ChunkTable::RecordBlocks(uint32_t chunk) const {
  return 1 + static_cast<uint32_t>(
                 PagesFor(PayloadBytesFor(RecordKind::kKeyValue, chunk_tokens_[chunk], row_bytes_)));
}

void ChunkTable::Grow(uint32_t chunk) {
  const size_t n = size_t{chunk} + 1;
  if (value_.size() < n) {
    value_.resize(n);
    chunk_tokens_.resize(n);
  }
  if (probe_block_.size() < n) {
    probe_block_.resize(n, kNoProbe);
    probe_stride_.resize(n, 0);
  }
  if (first_location_.size() < n) first_location_.resize(n);
}

void ChunkTable::Add(uint32_t chunk, uint16_t tokens, std::span<const Location> where,
                     uint32_t probe_block, uint16_t probe_stride) {
  Grow(chunk);
  chunk_tokens_[chunk] = tokens;
  SetLocations(chunk, where);
  SetProbes(chunk, probe_block, probe_stride);
  value_[chunk] = 0;
  Touch(chunk);
}

void ChunkTable::Clear(uint32_t chunk) {
  if (chunk < first_location_.size()) first_location_[chunk] = Location{};
  if (chunk < probe_block_.size()) probe_block_[chunk] = kNoProbe;
  scattered_.erase(chunk);
}

ChunkTable::Location ChunkTable::LocationOf(uint32_t chunk, uint16_t layer) const {
  auto it = scattered_.find(chunk);
  if (it != scattered_.end()) return it->second[layer];
  if (chunk >= first_location_.size()) return Location{};
  Location at = first_location_[chunk];
  if (at.segment == 0) return at;
  at.block += layer * RecordBlocks(chunk);
  return at;
}

std::vector<ChunkTable::Location> ChunkTable::LocationsOf(uint32_t chunk) const {
  std::vector<Location> out(layers_);
  for (uint16_t l = 0; l < layers_; ++l) out[l] = LocationOf(chunk, l);
  return out;
}

void ChunkTable::SetLocations(uint32_t chunk, std::span<const Location> where) {
  const uint32_t blocks = RecordBlocks(chunk);
  bool packed = true;
  for (uint16_t l = 1; l < layers_ && packed; ++l) {
    packed = where[l].segment == where[0].segment && where[l].block == where[0].block + l * blocks;
  }
  first_location_[chunk] = where[0];
  if (packed) {
    scattered_.erase(chunk);
  } else {
    scattered_[chunk].assign(where.begin(), where.end());
  }
}

ChunkTable::Location ChunkTable::ProbeLocationOf(uint32_t chunk, uint16_t layer) const {
  if (!HasProbes(chunk)) return Location{};
  const Location kv = LocationOf(chunk, 0);
  return Location{kv.segment, probe_block_[chunk] + layer * uint32_t{probe_stride_[chunk]}};
}

bool ChunkTable::HasProbes(uint32_t chunk) const {
  return chunk < probe_block_.size() && probe_block_[chunk] != kNoProbe;
}

void ChunkTable::SetProbes(uint32_t chunk, uint32_t probe_block, uint16_t probe_stride) {
  probe_block_[chunk] = probe_block;
  probe_stride_[chunk] = probe_stride;
}

void ChunkTable::Touch(uint32_t chunk) {
  // value_ holds log2(v) + t / H for a count v that halves every H accesses
  // (t: the access clock); comparing these compares the decayed counts at
  // any common time without updating every chunk.
  const double now = static_cast<double>(++clock_);
  if (half_life_ == 0) {
    value_[chunk] = now;  // pure recency
    return;
  }
  const double h = static_cast<double>(half_life_);
  const double rel = value_[chunk] - now / h;  // log2 of the decayed count now
  value_[chunk] = (rel < -60 ? 0.0 : std::log2(std::exp2(rel) + 1.0)) + now / h;
}

}  // namespace tierkv::store

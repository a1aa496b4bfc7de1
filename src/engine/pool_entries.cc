#include "engine/pool_entries.h"

#include <xxhash.h>

#include <algorithm>
#include <iterator>

namespace tierkv::engine {
namespace {

// Seeds: layer + 1 for whole entries (the store's first key scheme, kept so
// that keys are stable), then one block of 2^32 seeds per further kind.
uint64_t SeedOf(EntryKind kind, int layer) {
  if (kind == EntryKind::kWhole) return static_cast<uint64_t>(layer) + 1;
  return (static_cast<uint64_t>(kind) << 32) + static_cast<uint64_t>(layer);
}

}  // namespace

uint64_t PoolKey(EntryKind kind, uint64_t prefix_hash, int layer) {
  return XXH3_64bits_withSeed(&prefix_hash, sizeof prefix_hash, SeedOf(kind, layer));
}

void ErasePoolEntries(cache::TieredCache* pools, uint64_t prefix_hash, int layers) {
  for (int l = 0; l < layers; ++l) {
    for (EntryKind kind : {EntryKind::kWhole, EntryKind::kRows, EntryKind::kProbe}) {
      pools->Erase(PoolKey(kind, prefix_hash, l));
    }
  }
}

const char* RowEntryView::Find(std::span<const uint16_t> rows, const char* base, uint32_t r,
                               size_t row_bytes) {
  auto it = std::lower_bound(rows.begin(), rows.end(), r);
  if (it == rows.end() || *it != r) return nullptr;
  return base + static_cast<size_t>(it - rows.begin()) * row_bytes;
}

size_t RowEntryHeaderBytes(size_t nk, size_t nv) { return (8 + 2 * (nk + nv) + 7) / 8 * 8; }

RowEntryView ParseRowEntry(const std::vector<char>& e, size_t row_bytes) {
  RowEntryView out;
  uint32_t nk = 0, nv = 0;
  std::memcpy(&nk, e.data(), 4);
  std::memcpy(&nv, e.data() + 4, 4);
  const auto* rows = reinterpret_cast<const uint16_t*>(e.data() + 8);
  out.krows = {rows, nk};
  out.vrows = {rows + nk, nv};
  out.k = e.data() + RowEntryHeaderBytes(nk, nv);
  out.v = out.k + nk * row_bytes;
  return out;
}

std::vector<uint16_t> UnionRows(std::span<const uint16_t> a, std::span<const uint16_t> b) {
  std::vector<uint16_t> out;
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

void AdmitChunkLayer(cache::TieredCache* pools, bool selective, uint64_t prefix_hash, int layer,
                     std::span<const char> payload, uint32_t tokens, size_t row_bytes, size_t probe_bytes) {
  if (!selective) {
    pools->Admit(PoolKey(EntryKind::kWhole, prefix_hash, layer), payload.size(),
                 std::make_shared<std::vector<char>>(payload.begin(), payload.end()));
    return;
  }
  std::vector<uint16_t> all(tokens);
  for (uint32_t r = 0; r < tokens; ++r) all[r] = static_cast<uint16_t>(r);
  const char* k = payload.data();
  const char* v = k + size_t{tokens} * row_bytes;
  cache::Buffer rows = BuildRowEntry(
      all, all, row_bytes, [&](uint16_t r) { return k + r * row_bytes; },
      [&](uint16_t r) { return v + r * row_bytes; });
  pools->Admit(PoolKey(EntryKind::kRows, prefix_hash, layer), rows->size(), rows);
  if (probe_bytes == 0) return;
  auto probe = std::make_shared<std::vector<char>>(size_t{tokens} * probe_bytes);
  for (uint32_t r = 0; r < tokens; ++r) std::memcpy(probe->data() + r * probe_bytes, k + r * row_bytes, probe_bytes);
  pools->Admit(PoolKey(EntryKind::kProbe, prefix_hash, layer), probe->size(), probe);
}

}  // namespace tierkv::engine

// What the engine keeps in the device and host pools, and under which keys.
// Three kinds of entry per chunk layer, each keyed by the chunk's identity
// (its prefix hash) and the layer:
//   whole  both of the record's halves, K then V (as-like);
//   rows   the K rows and V rows of one chunk layer that selective requests
//          have read so far (a later request reads only the rows it lacks;
//          the entry is replaced by the union);
//   probe  the probe heads' keys of one chunk layer.
// Row entry layout: u32 nk, u32 nv, nk + nv u16 row numbers (ascending),
// padded to 8 bytes, then nk K rows and nv V rows of row_bytes each.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "cache/tiered_cache.h"

namespace tierkv::engine {

enum class EntryKind : uint32_t { kWhole = 0, kRows = 1, kProbe = 2 };
// The pool key of `kind` for a chunk layer. Distinct kinds never share a key
// (they hash with disjoint seeds).
uint64_t PoolKey(EntryKind kind, uint64_t prefix_hash, int layer);
// Removes every entry of a chunk (all kinds, layers [0, layers)).
void ErasePoolEntries(cache::TieredCache* pools, uint64_t prefix_hash, int layers);

// A parsed row entry; points into the entry's bytes.
struct RowEntryView {
  std::span<const uint16_t> krows, vrows;
  const char* k = nullptr;
  const char* v = nullptr;
  // Where row r's K (or V) is in the entry, or null.
  const char* K(uint32_t r, size_t row_bytes) const { return Find(krows, k, r, row_bytes); }
  const char* V(uint32_t r, size_t row_bytes) const { return Find(vrows, v, r, row_bytes); }
  static const char* Find(std::span<const uint16_t> rows, const char* base, uint32_t r,
                          size_t row_bytes);
};

size_t RowEntryHeaderBytes(size_t nk, size_t nv);
// The entry must have been built by BuildRowEntry with the same row_bytes.
RowEntryView ParseRowEntry(const std::vector<char>& entry, size_t row_bytes);

// An entry holding `krows` and `vrows` (ascending); `kof(r)`/`vof(r)` give
// row r's bytes.
template <typename KOf, typename VOf>
cache::Buffer BuildRowEntry(const std::vector<uint16_t>& krows, const std::vector<uint16_t>& vrows,
                            size_t row_bytes, KOf kof, VOf vof) {
  const size_t nk = krows.size(), nv = vrows.size();
  const size_t header = RowEntryHeaderBytes(nk, nv);
  auto e = std::make_shared<std::vector<char>>(header + (nk + nv) * row_bytes);
  const uint32_t n32[2] = {static_cast<uint32_t>(nk), static_cast<uint32_t>(nv)};
  std::memcpy(e->data(), n32, sizeof n32);
  // (An empty list's data() may be null, which memcpy must not be given.)
  if (nk) std::memcpy(e->data() + sizeof n32, krows.data(), 2 * nk);
  if (nv) std::memcpy(e->data() + sizeof n32 + 2 * nk, vrows.data(), 2 * nv);
  char* k = e->data() + header;
  char* v = k + nk * row_bytes;
  for (size_t i = 0; i < nk; ++i) std::memcpy(k + i * row_bytes, kof(krows[i]), row_bytes);
  for (size_t i = 0; i < nv; ++i) std::memcpy(v + i * row_bytes, vof(vrows[i]), row_bytes);
  return e;
}

// Admits one chunk layer's K/V (`payload`: K then V of `tokens` rows,
// token-major, as a record holds them) in the form the reader of `selective`
// systems looks for: a whole entry; or a row entry of every row and the
// probe keys (the first `probe_bytes` of each K row). For chunks fetched from
// the remote tier, so that the request after the fetch reads nothing again.
void AdmitChunkLayer(cache::TieredCache* pools, bool selective, uint64_t prefix_hash, int layer,
                     std::span<const char> payload, uint32_t tokens, size_t row_bytes, size_t probe_bytes);

// The union of two ascending row lists.
std::vector<uint16_t> UnionRows(std::span<const uint16_t> a, std::span<const uint16_t> b);

}  // namespace tierkv::engine

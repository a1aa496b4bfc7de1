// What a record read from disk must turn out to be, and the check: the
// header's checksum and identity (fingerprint, kind, layer, prefix hash,
// token span, row size, dtype), a reordered record's row positions against
// its run's mapping list, and the checksum of every payload page (or of the
// pages read). A failure is Corruption: the caller never serves the bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "index/mapping_list.h"
#include "store/chunk_store.h"
#include "store/format.h"
#include "tierkv/status.h"

namespace tierkv::store {

using Location = ChunkStore::Location;

// A reordered run (IMPRESS 4.4.1): chunks of one radix node whose rows are
// written per layer in descending importance, with the mapping list from
// row to slot. Immutable once installed; shared with reads in flight.
struct Run {
  std::vector<uint32_t> chunks;
  std::vector<uint64_t> hashes;
  uint32_t first_token = 0, rows = 0;
  uint64_t end_hash = 0, parent_hash = 0;  // identity of its records
  index::MappingList map;
  uint32_t records = 0;         // per layer: ceil(rows / C)
  std::vector<Location> where;  // layer-major: where[layer * records + i]
  uint64_t bytes = 0;
  uint32_t chunk_tokens = 0;
  // Tokens of record i (of a layer): chunk_tokens, the last one fewer.
  uint32_t RecordTokens(uint32_t i) const;
};

struct Expect {
  RecordKind kind = RecordKind::kKeyValue;
  uint16_t layer = 0;
  uint64_t prefix_hash = 0;
  uint32_t first_token = 0, tokens = 0;
  uint32_t row_bytes = 0;    // 0: the store's row_bytes (K/V records)
  const Run* run = nullptr;  // kReorderedKeyValue: positions must map to record `run_record`
  uint32_t run_record = 0;
};

class RecordChecker {
 public:
  RecordChecker(uint64_t fingerprint, uint32_t row_bytes, KvDtype dtype, uint32_t chunk_tokens)
      : fingerprint_(fingerprint), row_bytes_(row_bytes), dtype_(dtype), chunk_tokens_(chunk_tokens) {}
  // The header of block0, if it is what `e` expects.
  Result<RecordHeader> CheckHeader(const char* block0, const Expect& e) const;
  // The header and every payload page of a whole record.
  Status Verify(const char* record, const Expect& e) const;
  // The header and the payload pages marked in `pages` (read selectively);
  // the header, checked, on success.
  Result<RecordHeader> VerifyPages(const char* record, const Expect& e, const std::vector<bool>& pages) const;

 private:
  uint64_t fingerprint_;
  uint32_t row_bytes_;
  KvDtype dtype_;
  uint32_t chunk_tokens_;
};

// The expectation for a chunk's own K/V record of `layer`.
Expect KeyValueExpect(uint16_t layer, uint64_t prefix_hash, uint32_t first_token, uint32_t tokens);
// The expectation for record `record` of `layer` of a reordered run.
Expect RunRecordExpect(const Run& run, uint16_t layer, uint32_t record);

// The payload pages marked in `pages` (page i at record + (1 + i) * 4 KiB)
// against their checksums. Corruption naming the first bad page.
Status CheckPages(const char* record, std::span<const uint64_t> checksums, const std::vector<bool>& pages);

}  // namespace tierkv::store

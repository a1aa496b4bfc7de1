// The on-disk format of chunk records: every constant lives here, and
// docs/format.md describes the same layout in prose.
//
// A record starts at a 4 KiB boundary of a segment file. Block 0 is the
// header; the payload follows in whole 4 KiB pages, each with its own checksum
// in the header, so that a reader may fetch and verify only some pages (the
// rows it selected). The record's identity (fingerprint, kind, layer, prefix
// hash, token span) sits under the header checksum, so a record read from the
// wrong place, or a stale copy, is detected as well as a flipped bit.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tierkv/status.h"

namespace tierkv::store {

inline constexpr uint32_t kBlockSize = 4096;
inline constexpr uint64_t kRecordMagic = 0x3130434552564b54ULL;  // "TKVREC01" little-endian
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr uint32_t kFixedHeaderBytes = 80;
// The header checksum covers bytes [0, kHeaderChecksumOffset) of block 0.
inline constexpr uint32_t kHeaderChecksumOffset = kBlockSize - 8;
// Segment files: seg-<6 digits>.tkv, at most this many bytes each.
inline constexpr uint64_t kDefaultSegmentBytes = 256ull << 20;

enum class RecordKind : uint8_t {
  // Keys then values of `token_count` tokens of one layer, token-major: all KV
  // heads of a token are contiguous (row t of K at t * row_bytes).
  kKeyValue = 1,
  // The probe heads' keys of a token span of one layer, token-major.
  kProbeKeys = 2,
  // A reordered run of chunks (IMPRESS 4.4.1): keys then values of one layer
  // of `token_count` rows stored in descending importance. `tokens` holds the
  // rows' absolute positions instead of token ids; `first_token` is the run's
  // first position and `prefix_hash` the hash through the run's last chunk.
  // An extra copy: the chunks' own kKeyValue records stay the source of truth.
  kReorderedKeyValue = 3,
};

enum class KvDtype : uint8_t { kF32 = 1, kF16 = 2 };

// The identity and geometry of a record: everything but the payload bytes.
struct RecordHeader {
  uint64_t fingerprint = 0;   // the model namespace (Fingerprint::id)
  RecordKind kind = RecordKind::kKeyValue;
  KvDtype dtype = KvDtype::kF16;
  uint16_t layer = 0;
  uint32_t first_token = 0;   // absolute position of the first token
  uint32_t token_count = 0;
  uint32_t row_bytes = 0;     // bytes per token of K (and of V)
  uint64_t prefix_hash = 0;   // hash of all tokens [0, first_token + token_count)
  uint64_t parent_hash = 0;   // hash of tokens [0, first_token) (0 at position 0)
  uint64_t sequence = 0;      // store-wide write order (recovery keeps the newest)
  uint32_t payload_bytes = 0; // before padding to whole pages
  std::vector<int32_t> tokens;           // the record's own token ids
  std::vector<uint64_t> page_checksums;  // one per payload page
};

inline uint32_t PagesFor(uint64_t bytes) {
  return static_cast<uint32_t>((bytes + kBlockSize - 1) / kBlockSize);
}

// Payload bytes of a record: 2 * tokens * row_bytes for K/V, tokens * row_bytes for probes.
uint64_t PayloadBytesFor(RecordKind kind, uint32_t tokens, uint32_t row_bytes);

// Whether a record of this geometry fits the header block (token ids and page
// checksums share it); InvalidArgument naming the limit otherwise.
Status CheckGeometry(RecordKind kind, uint32_t tokens, uint32_t row_bytes);
// The most tokens one record of `kind` with rows of `row_bytes` holds (its
// header lists the tokens and the pages' checksums); 0 if not even one.
uint32_t MaxRecordTokens(RecordKind kind, uint32_t row_bytes);

// Serialises a whole record (header block + padded payload) into `out`, which
// is resized to a multiple of kBlockSize. Fills header.page_checksums.
// REQUIRES: payload.size() == PayloadBytesFor(header...), CheckGeometry ok.
void EncodeRecord(RecordHeader& header, std::span<const char> payload, std::string* out);

// Parses and verifies a header block: magic, version, header checksum, field
// ranges. Corruption names the first bad field.
Result<RecordHeader> DecodeHeader(std::span<const char, kBlockSize> block);

// Verifies payload page `page` (kBlockSize bytes) against the header.
bool PageChecksumOk(const RecordHeader& header, uint32_t page, std::span<const char> bytes);

uint64_t PageChecksum(std::span<const char> bytes);

}  // namespace tierkv::store

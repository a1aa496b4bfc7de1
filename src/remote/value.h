// What a remote value is: one chunk layer as a store record (docs/format.md
// "Remote values"). Kind 1 holds the rows in token order; kind 3 (written
// when the local store knows the chunk's importance order) holds them in
// descending importance, with each row's absolute position in the header, so
// that a reader that wants the important part fetches a prefix of K and of V.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "store/format.h"
#include "store/record_check.h"
#include "tierkv/status.h"

namespace tierkv::remote {

// The chunk a value was fetched for.
struct ValueIdentity {
  uint16_t layer = 0;
  uint64_t prefix_hash = 0;
  uint32_t first_token = 0;
  uint32_t tokens = 0;                   // the chunk size: only whole chunks go up
  std::span<const int32_t> token_ids;    // the chunk's tokens (kind 1 lists them)
};

// `h` carries the identity (fingerprint, dtype, layer, first_token,
// token_count, row_bytes, hashes, token ids); `payload` is K then V in token
// order. With an `order` of every row (the chunk's rows by descending
// importance) the value is kind 3 with rows in that order; otherwise kind 1.
void EncodeValue(store::RecordHeader h, std::span<const char> payload, std::span<const uint16_t> order,
                 std::string* out);

// `order` (rows by descending importance) in whole units of `unit`
// consecutive rows (a page's rows, a block; aligned to the chunk's start):
// units ranked by their rows' Borda scores (C - rank, summed), each unit's
// rows in token order, so that the first k rows of a value are whole
// units, as the reader's selection takes them. Unchanged for unit <= 1 or
// an empty order.
std::vector<uint16_t> UnitOrder(std::span<const uint16_t> order, uint32_t unit);

// Verifies a whole value of either kind (header, identity, every page; a
// kind-3 value's positions must be a permutation of the chunk's) and leaves
// its payload in token order, K then V, at value->data() + kBlockSize.
// Corruption naming what failed.
Status TakeWholeValue(const store::RecordChecker& check, const ValueIdentity& id, std::string* value);

// An ordered value's checked header (kind 3, the identity of `id`, positions
// a permutation of the chunk's). NotFound for a valid kind-1 value
// (no order to read a part by); Corruption otherwise.
Result<store::RecordHeader> CheckOrderedHeader(const store::RecordChecker& check, const ValueIdentity& id,
                                               std::string_view block0);

// A byte range of a value to fetch, [first, last] (GETRANGE's, inclusive);
// its payload pages start at page `first_page` (the range that starts with
// the header block: page 0 right after it).
struct ByteRange {
  uint64_t first = 0, last = 0;
  uint32_t first_page = 0;
};
// The ranges holding the header and the first `keep` rows of K and of V of
// an ordered value of `tokens` rows: the header with K's pages (adjacent),
// then V's pages (one range with K's when they meet).
std::vector<ByteRange> ImportantRanges(uint32_t keep, uint32_t tokens, uint32_t row_bytes);

}  // namespace tierkv::remote

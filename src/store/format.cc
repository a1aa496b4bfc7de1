#include "store/format.h"

#include <xxhash.h>

#include <cstring>

namespace tierkv::store {
namespace {

// Header block layout (little-endian; the machines we target are):
//   0 u64 magic            8 u32 version          12 u8 kind      13 u8 dtype
//  14 u16 layer           16 u64 fingerprint      24 u32 first_token
//  28 u32 token_count     32 u32 row_bytes        36 u32 payload_bytes
//  40 u64 prefix_hash     48 u64 parent_hash      56 u64 sequence
//  64 u32 page_count      68 u32 reserved (0)     72 u64 reserved (0)
//  80 i32 tokens[token_count], then u64 page_checksums[page_count]
//  4088 u64 xxh3 of bytes [0, 4088)
template <typename T>
void Put(char* base, size_t off, T v) {
  std::memcpy(base + off, &v, sizeof v);
}
template <typename T>
T Get(const char* base, size_t off) {
  T v;
  std::memcpy(&v, base + off, sizeof v);
  return v;
}

constexpr uint64_t kChecksumSeed = 0x746b76636b73756dULL;

size_t VariableBytes(uint32_t tokens, uint32_t pages) {
  return size_t{tokens} * 4 + size_t{pages} * 8;
}

}  // namespace

uint64_t PayloadBytesFor(RecordKind kind, uint32_t tokens, uint32_t row_bytes) {
  uint64_t one = uint64_t{tokens} * row_bytes;
  return kind == RecordKind::kProbeKeys ? one : 2 * one;
}

Status CheckGeometry(RecordKind kind, uint32_t tokens, uint32_t row_bytes) {
  if (tokens == 0) return Status::InvalidArgument("record: token_count is 0");
  if (row_bytes == 0) return Status::InvalidArgument("record: row_bytes is 0");
  uint64_t payload = PayloadBytesFor(kind, tokens, row_bytes);
  if (payload > UINT32_MAX) return Status::InvalidArgument("record: payload over 4 GiB");
  size_t need = kFixedHeaderBytes + VariableBytes(tokens, PagesFor(payload));
  if (need > kHeaderChecksumOffset) {
    return Status::InvalidArgument(
        "record: " + std::to_string(tokens) + " tokens of " + std::to_string(row_bytes) +
        " bytes need " + std::to_string(need) + " header bytes (limit " +
        std::to_string(kHeaderChecksumOffset) + "); use smaller chunks");
  }
  return Status::Ok();
}

uint32_t MaxRecordTokens(RecordKind kind, uint32_t row_bytes) {
  // The header grows with the tokens: the largest that fits, by bisection.
  uint32_t lo = 0, hi = kBlockSize;  // CheckGeometry(lo) holds (or lo is 0); (hi) fails
  if (CheckGeometry(kind, hi, row_bytes).ok()) return hi;
  while (hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    (CheckGeometry(kind, mid, row_bytes).ok() ? lo : hi) = mid;
  }
  return lo;
}

uint64_t PageChecksum(std::span<const char> bytes) {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), kChecksumSeed);
}

void EncodeRecord(RecordHeader& h, std::span<const char> payload, std::string* out) {
  const uint32_t pages = PagesFor(payload.size());
  out->assign(size_t{kBlockSize} * (1 + pages), '\0');
  char* block = out->data();
  std::memcpy(block + kBlockSize, payload.data(), payload.size());
  h.payload_bytes = static_cast<uint32_t>(payload.size());
  h.page_checksums.resize(pages);
  for (uint32_t p = 0; p < pages; ++p) {
    h.page_checksums[p] = PageChecksum({block + kBlockSize * (1 + size_t{p}), kBlockSize});
  }
  Put<uint64_t>(block, 0, kRecordMagic);
  Put<uint32_t>(block, 8, kFormatVersion);
  Put<uint8_t>(block, 12, static_cast<uint8_t>(h.kind));
  Put<uint8_t>(block, 13, static_cast<uint8_t>(h.dtype));
  Put<uint16_t>(block, 14, h.layer);
  Put<uint64_t>(block, 16, h.fingerprint);
  Put<uint32_t>(block, 24, h.first_token);
  Put<uint32_t>(block, 28, static_cast<uint32_t>(h.tokens.size()));
  Put<uint32_t>(block, 32, h.row_bytes);
  Put<uint32_t>(block, 36, h.payload_bytes);
  Put<uint64_t>(block, 40, h.prefix_hash);
  Put<uint64_t>(block, 48, h.parent_hash);
  Put<uint64_t>(block, 56, h.sequence);
  Put<uint32_t>(block, 64, pages);
  h.token_count = static_cast<uint32_t>(h.tokens.size());
  std::memcpy(block + kFixedHeaderBytes, h.tokens.data(), h.tokens.size() * 4);
  std::memcpy(block + kFixedHeaderBytes + h.tokens.size() * 4, h.page_checksums.data(),
              pages * 8);
  Put<uint64_t>(block, kHeaderChecksumOffset,
                XXH3_64bits_withSeed(block, kHeaderChecksumOffset, kChecksumSeed));
}

Result<RecordHeader> DecodeHeader(std::span<const char, kBlockSize> span) {
  const char* b = span.data();
  auto bad = [](const std::string& what) { return Status::Corruption("record header: " + what); };
  if (Get<uint64_t>(b, 0) != kRecordMagic) return bad("bad magic");
  if (Get<uint64_t>(b, kHeaderChecksumOffset) !=
      XXH3_64bits_withSeed(b, kHeaderChecksumOffset, kChecksumSeed)) {
    return bad("header checksum mismatch");
  }
  uint32_t version = Get<uint32_t>(b, 8);
  if (version != kFormatVersion) {
    return bad("format version " + std::to_string(version) + " (this build reads " +
               std::to_string(kFormatVersion) + ")");
  }
  RecordHeader h;
  uint8_t kind = Get<uint8_t>(b, 12), dtype = Get<uint8_t>(b, 13);
  if (kind < 1 || kind > 3) return bad("kind " + std::to_string(kind));
  if (dtype != 1 && dtype != 2) return bad("dtype " + std::to_string(dtype));
  h.kind = static_cast<RecordKind>(kind);
  h.dtype = static_cast<KvDtype>(dtype);
  h.layer = Get<uint16_t>(b, 14);
  h.fingerprint = Get<uint64_t>(b, 16);
  h.first_token = Get<uint32_t>(b, 24);
  h.token_count = Get<uint32_t>(b, 28);
  h.row_bytes = Get<uint32_t>(b, 32);
  h.payload_bytes = Get<uint32_t>(b, 36);
  h.prefix_hash = Get<uint64_t>(b, 40);
  h.parent_hash = Get<uint64_t>(b, 48);
  h.sequence = Get<uint64_t>(b, 56);
  uint32_t pages = Get<uint32_t>(b, 64);
  Status geometry = CheckGeometry(h.kind, h.token_count, h.row_bytes);
  if (!geometry.ok()) return bad(geometry.message());
  if (h.payload_bytes != PayloadBytesFor(h.kind, h.token_count, h.row_bytes)) {
    return bad("payload_bytes " + std::to_string(h.payload_bytes) + " does not match the geometry");
  }
  if (pages != PagesFor(h.payload_bytes)) return bad("page_count " + std::to_string(pages));
  h.tokens.resize(h.token_count);
  std::memcpy(h.tokens.data(), b + kFixedHeaderBytes, size_t{h.token_count} * 4);
  h.page_checksums.resize(pages);
  std::memcpy(h.page_checksums.data(), b + kFixedHeaderBytes + size_t{h.token_count} * 4,
              size_t{pages} * 8);
  return h;
}

bool PageChecksumOk(const RecordHeader& h, uint32_t page, std::span<const char> bytes) {
  return page < h.page_checksums.size() && bytes.size() == kBlockSize &&
         PageChecksum(bytes) == h.page_checksums[page];
}

}  // namespace tierkv::store

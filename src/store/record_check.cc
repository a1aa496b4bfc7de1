#include "store/record_check.h"

#include <algorithm>
#include <string>

namespace tierkv::store {

uint32_t Run::RecordTokens(uint32_t i) const { return std::min(chunk_tokens, rows - i * chunk_tokens); }

Expect KeyValueExpect(uint16_t layer, uint64_t prefix_hash, uint32_t first_token, uint32_t tokens) {
  Expect e;
  e.layer = layer;
  e.prefix_hash = prefix_hash;
  e.first_token = first_token;
  e.tokens = tokens;
  return e;
}

Expect RunRecordExpect(const Run& run, uint16_t layer, uint32_t record) {
  Expect e;
  e.kind = RecordKind::kReorderedKeyValue;
  e.layer = layer;
  e.prefix_hash = run.end_hash;
  e.first_token = run.first_token;
  e.tokens = run.RecordTokens(record);
  e.run = &run;
  e.run_record = record;
  return e;
}

Status CheckPages(const char* record, std::span<const uint64_t> checksums, const std::vector<bool>& pages) {
  for (uint32_t pg = 0; pg < pages.size(); ++pg) {
    if (!pages[pg]) continue;
    if (pg >= checksums.size() ||
        PageChecksum({record + kBlockSize * (1 + size_t{pg}), kBlockSize}) != checksums[pg]) {
      return Status::Corruption("payload page " + std::to_string(pg) + " checksum mismatch");
    }
  }
  return Status::Ok();
}

Result<RecordHeader> RecordChecker::CheckHeader(const char* block0, const Expect& e) const {
  auto h = DecodeHeader(std::span<const char, kBlockSize>(block0, kBlockSize));
  if (!h.ok()) return h.status();
  if (h->fingerprint != fingerprint_ || h->kind != e.kind || h->layer != e.layer ||
      h->prefix_hash != e.prefix_hash || h->first_token != e.first_token ||
      h->token_count != e.tokens || h->row_bytes != (e.row_bytes != 0 ? e.row_bytes : row_bytes_) ||
      h->dtype != dtype_) {
    return Status::Corruption("record identity does not match the chunk it was read for");
  }
  if (e.run != nullptr) {
    // A reordered record names the original position of each of its rows;
    // each must sit exactly where the mapping list says.
    const uint32_t base = e.run_record * chunk_tokens_;
    for (uint32_t j = 0; j < h->token_count; ++j) {
      const int64_t row = int64_t{h->tokens[j]} - e.run->first_token;
      if (row < 0 || row >= e.run->rows ||
          e.run->map.SlotOf(e.layer, static_cast<uint32_t>(row)) != base + j) {
        return Status::Corruption("reordered record's row positions disagree with its mapping list");
      }
    }
  }
  return h;
}

Status RecordChecker::Verify(const char* record, const Expect& e) const {
  ASSIGN_OR_RETURN(RecordHeader h, CheckHeader(record, e));
  return CheckPages(record, h.page_checksums, std::vector<bool>(h.page_checksums.size(), true));
}

Result<RecordHeader> RecordChecker::VerifyPages(const char* record, const Expect& e,
                                                const std::vector<bool>& pages) const {
  ASSIGN_OR_RETURN(RecordHeader h, CheckHeader(record, e));
  RETURN_IF_ERROR(CheckPages(record, h.page_checksums, pages));
  return h;
}

}  // namespace tierkv::store

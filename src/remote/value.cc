#include "remote/value.h"

#include <algorithm>
#include <cstring>

namespace tierkv::remote {
namespace {

store::Expect ExpectFor(const ValueIdentity& id, store::RecordKind kind) {
  store::Expect e = store::KeyValueExpect(id.layer, id.prefix_hash, id.first_token, id.tokens);
  e.kind = kind;
  return e;
}

// The rows' positions relative to the chunk, if they are a permutation of it.
bool RelativeOrder(const store::RecordHeader& h, const ValueIdentity& id, std::vector<uint32_t>* rel) {
  std::vector<bool> seen(id.tokens, false);
  rel->resize(h.tokens.size());
  for (size_t j = 0; j < h.tokens.size(); ++j) {
    const int64_t r = int64_t{h.tokens[j]} - id.first_token;
    if (r < 0 || r >= id.tokens || seen[r]) return false;
    seen[r] = true;
    (*rel)[j] = static_cast<uint32_t>(r);
  }
  return true;
}

}  // namespace

void EncodeValue(store::RecordHeader h, std::span<const char> payload, std::span<const uint16_t> order,
                 std::string* out) {
  if (order.size() != h.token_count) {  // no order (or not one of this chunk's rows)
    h.kind = store::RecordKind::kKeyValue;
    store::EncodeRecord(h, payload, out);
    return;
  }
  const size_t rb = h.row_bytes, n = h.token_count;
  std::string ordered(payload.size(), '\0');
  h.kind = store::RecordKind::kReorderedKeyValue;
  for (size_t j = 0; j < n; ++j) {
    h.tokens[j] = static_cast<int32_t>(h.first_token + order[j]);
    std::memcpy(ordered.data() + j * rb, payload.data() + order[j] * rb, rb);
    std::memcpy(ordered.data() + (n + j) * rb, payload.data() + (n + order[j]) * rb, rb);
  }
  store::EncodeRecord(h, ordered, out);
}

std::vector<uint16_t> UnitOrder(std::span<const uint16_t> order, uint32_t unit) {
  const size_t n = order.size();
  if (unit <= 1 || n == 0) return std::vector<uint16_t>(order.begin(), order.end());
  const size_t units = (n + unit - 1) / unit;
  std::vector<double> score(units, 0.0);
  for (size_t rank = 0; rank < n; ++rank) score[order[rank] / unit] += static_cast<double>(n - rank);
  std::vector<size_t> by(units);
  for (size_t u = 0; u < units; ++u) by[u] = u;
  std::stable_sort(by.begin(), by.end(), [&](size_t a, size_t b) { return score[a] > score[b]; });
  std::vector<uint16_t> out;
  out.reserve(n);
  for (size_t u : by) {
    for (size_t r = u * unit; r < std::min(n, (u + 1) * unit); ++r) out.push_back(static_cast<uint16_t>(r));
  }
  return out;
}

Status TakeWholeValue(const store::RecordChecker& check, const ValueIdentity& id, std::string* value) {
  if (value->size() < store::kBlockSize) return Status::Corruption("remote value shorter than a header");
  const std::string_view block0(value->data(), store::kBlockSize);
  auto h = store::DecodeHeader(std::span<const char, store::kBlockSize>(block0.data(), store::kBlockSize));
  if (!h.ok()) return h.status();
  const bool ordered = h->kind == store::RecordKind::kReorderedKeyValue;
  const store::Expect e = ExpectFor(id, h->kind);
  const uint32_t pages = h->page_checksums.size();
  if (value->size() != store::kBlockSize * (1 + size_t{pages})) {
    return Status::Corruption("remote value of " + std::to_string(value->size()) + " bytes, its header says " +
                              std::to_string(store::kBlockSize * (1 + size_t{pages})));
  }
  ASSIGN_OR_RETURN(store::RecordHeader checked, check.VerifyPages(value->data(), e, std::vector<bool>(pages, true)));
  if (!ordered) {
    if (!std::equal(checked.tokens.begin(), checked.tokens.end(), id.token_ids.begin(), id.token_ids.end())) {
      return Status::Corruption("remote value's token ids are not the chunk's");
    }
    return Status::Ok();
  }
  std::vector<uint32_t> rel;
  if (!RelativeOrder(checked, id, &rel)) return Status::Corruption("remote value's row positions are no permutation");
  // Back to token order, in place through one copy of the payload.
  const size_t rb = checked.row_bytes, n = id.tokens;
  char* payload = value->data() + store::kBlockSize;
  const std::string copy(payload, 2 * n * rb);
  for (size_t j = 0; j < n; ++j) {
    std::memcpy(payload + rel[j] * rb, copy.data() + j * rb, rb);
    std::memcpy(payload + (n + rel[j]) * rb, copy.data() + (n + j) * rb, rb);
  }
  return Status::Ok();
}

Result<store::RecordHeader> CheckOrderedHeader(const store::RecordChecker& check, const ValueIdentity& id,
                                               std::string_view block0) {
  if (block0.size() != store::kBlockSize) return Status::Corruption("remote value shorter than a header");
  auto h = check.CheckHeader(block0.data(), ExpectFor(id, store::RecordKind::kReorderedKeyValue));
  if (!h.ok()) {
    if (check.CheckHeader(block0.data(), ExpectFor(id, store::RecordKind::kKeyValue)).ok()) {
      return Status::NotFound("remote value in token order: no importance order to read a part by");
    }
    return h.status();
  }
  std::vector<uint32_t> rel;
  if (!RelativeOrder(*h, id, &rel)) return Status::Corruption("remote value's row positions are no permutation");
  return h;
}

std::vector<ByteRange> ImportantRanges(uint32_t keep, uint32_t tokens, uint32_t row_bytes) {
  const uint64_t B = store::kBlockSize, rb = row_bytes, half = uint64_t{tokens} * rb;
  const uint32_t k_end = static_cast<uint32_t>((keep * rb + B - 1) / B);             // K: pages [0, k_end)
  const uint32_t v_first = static_cast<uint32_t>(half / B);                          // V: [v_first, v_end)
  const uint32_t v_end = static_cast<uint32_t>((half + keep * rb + B - 1) / B);
  if (keep == 0) return {ByteRange{0, B - 1, 0}};
  if (v_first <= k_end) return {ByteRange{0, B + uint64_t{std::max(k_end, v_end)} * B - 1, 0}};
  return {ByteRange{0, B + uint64_t{k_end} * B - 1, 0}, ByteRange{B + uint64_t{v_first} * B, B + uint64_t{v_end} * B - 1, v_first}};
}

}  // namespace tierkv::remote

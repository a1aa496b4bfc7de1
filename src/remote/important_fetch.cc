// RemoteRead::kImportant: the important part of ordered values (CaR's
// sparsified far tier, read as a prefix of one copy). Per chunk layer one
// pipeline entry or two: GETRANGE of the header block and the pages holding
// the first `keep` K rows (adjacent, so one range), and GETRANGE of the
// pages holding the first `keep` V rows, then GETRANGE of its seal (after
// the record: seal.h). The header and the seal are checked with the MAC,
// every page against the seal's digest and the header's checksum; a value
// overwritten between the ranges fails them and is a miss like any damaged
// one.
#include <algorithm>
#include <cstring>

#include "index/radix_tree.h"
#include "remote/remote_tier.h"
#include "remote/value.h"
#include "tierkv/elapsed.h"
#include "tierkv/logging.h"

namespace tierkv::remote {
namespace {

// Payload byte `off` of a value, if one of the fetched ranges holds it.
const char* At(std::span<const ByteRange> ranges, const std::vector<const std::string*>& data, uint64_t off) {
  const uint64_t abs = store::kBlockSize + off;
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (abs >= ranges[i].first && abs <= ranges[i].last) return data[i]->data() + (abs - ranges[i].first);
  }
  return nullptr;
}

}  // namespace

FarRows RemoteTier::FetchImportant(std::span<const int32_t> tokens, size_t start, uint64_t parent_hash,
                                   size_t limit, std::span<const uint32_t> keep) {
  FarRows out;
  out.start = out.end = start;
  const size_t C = geo_.chunk_tokens;
  if (start % C != 0 || limit > tokens.size() || limit < start + C || keep.size() != geo_.layers) return out;
  const size_t n = std::min<size_t>((limit - start) / C, opts_.max_fetch_chunks);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<uint64_t> hashes(n);
  uint64_t h = parent_hash;
  for (size_t i = 0; i < n; ++i) hashes[i] = h = index::ChainHash(h, tokens.subspan(start + i * C, C));
  out.positions.resize(geo_.layers);
  out.k.resize(geo_.layers);
  out.v.resize(geo_.layers);
  {
    MutexLock l(&fetch_mu_);
    for (size_t first = 0; first < n; first += kChunksPerPipeline) {
      if (!FetchImportantGroup(tokens, start, hashes, first, std::min(n, first + kChunksPerPipeline), keep, &out)) {
        break;
      }
    }
  }
  out.end = start + out.chunks * C;
  out.ms = MsSince(t0);
  MutexLock l(&mu_);
  ++stats_.lookups;
  if (out.chunks < n) ++stats_.misses;
  stats_.important_chunks += out.chunks;
  stats_.important_bytes += out.bytes;
  stats_.important_value_bytes += out.value_bytes;
  stats_.bytes_down += out.bytes;
  stats_.fetch_ms_total += out.ms;
  return out;
}

bool RemoteTier::FetchImportantGroup(std::span<const int32_t> tokens, size_t start, std::span<const uint64_t> hashes,
                                     size_t first, size_t last, std::span<const uint32_t> keep, FarRows* out) {
  const uint32_t C = geo_.chunk_tokens;
  std::vector<std::vector<ByteRange>> ranges(geo_.layers);
  for (uint16_t l = 0; l < geo_.layers; ++l) ranges[l] = ImportantRanges(std::min(keep[l], C), C, geo_.row_bytes);
  // The seal follows the record (of a whole chunk layer: its size is known).
  const uint32_t pages = ValuePages();
  const uint64_t seal_first = store::kBlockSize * (1ull + pages);
  const uint64_t seal_last = seal_first + Sealer::SealBytes(pages) - 1;
  std::vector<Command> cmds;
  for (size_t i = first; i < last; ++i) {
    for (uint16_t l = 0; l < geo_.layers; ++l) {
      const std::string key = ChunkKey(geo_.fingerprint, hashes[i], l);
      for (const ByteRange& r : ranges[l]) {
        cmds.push_back({"GETRANGE", key, std::to_string(r.first), std::to_string(r.last)});
      }
      cmds.push_back({"GETRANGE", key, std::to_string(seal_first), std::to_string(seal_last)});
    }
  }
  std::vector<Reply> replies;
  std::vector<ErrorKind> errors;
  RunCounted(&fetch_router_, cmds, &replies, &errors);
  // Per chunk, its rows; layers in token order (no importance known when
  // they went up: a layer whose probes fell back) are fetched whole next.
  std::vector<FarRows> staged;
  std::vector<std::pair<size_t, uint16_t>> whole;  // (staged index, layer)
  bool stopped = false;
  size_t j = 0;  // the next reply
  for (size_t i = first; i < last; ++i) {
    const uint32_t pos = static_cast<uint32_t>(start + i * C);
    FarRows chunk;
    chunk.positions.resize(geo_.layers);
    chunk.k.resize(geo_.layers);
    chunk.v.resize(geo_.layers);
    size_t unordered = 0;
    for (uint16_t l = 0; l < geo_.layers && !stopped; ++l) {
      const size_t n = ranges[l].size() + 1;  // and the seal
      const ValueIdentity id{l, hashes[i], pos, C, tokens.subspan(pos, C)};
      const Take t = TakeImportant(id, ranges[l], std::span(replies).subspan(j, n), std::span(errors).subspan(j, n),
                                   std::min(keep[l], C), &chunk);
      j += n;
      if (t == Take::kTokenOrder) ++unordered;
      stopped = t == Take::kFail;
    }
    // A chunk without any order (an as-like writer's) is no far chunk: it
    // ends the run, and the caller fetches whole chunks into the store.
    stopped = stopped || unordered == geo_.layers;
    if (stopped) break;
    for (uint16_t l = 0; l < geo_.layers; ++l) {
      if (chunk.positions[l].empty()) whole.emplace_back(staged.size(), l);
    }
    staged.push_back(std::move(chunk));
  }
  size_t good = staged.size();
  if (!whole.empty()) good = std::min(good, FetchWholeLayers(tokens, start, hashes, first, whole, &staged));
  for (size_t c = 0; c < good; ++c) {
    for (uint16_t l = 0; l < geo_.layers; ++l) {
      out->positions[l].insert(out->positions[l].end(), staged[c].positions[l].begin(), staged[c].positions[l].end());
      out->k[l] += staged[c].k[l];
      out->v[l] += staged[c].v[l];
    }
    out->bytes += staged[c].bytes;
    out->value_bytes += staged[c].value_bytes;
    ++out->chunks;
  }
  return good == last - first;
}

RemoteTier::Take RemoteTier::TakeImportant(const ValueIdentity& id, std::span<const ByteRange> ranges,
                                           std::span<const Reply> replies, std::span<const ErrorKind> errors,
                                           uint32_t keep, FarRows* chunk) {
  const uint32_t C = geo_.chunk_tokens;
  const size_t rb = geo_.row_bytes;
  const uint16_t l = id.layer;
  const uint32_t pages = ValuePages();
  for (size_t q = 0; q < replies.size(); ++q) {
    if (errors[q] != ErrorKind::kNone) return Take::kFail;  // counted by RunCounted
    if (replies[q].is_error()) {
      CountErrorReply(replies[q]);
      return Take::kFail;
    }
    if (replies[q].type != Reply::Type::kString || replies[q].str.empty()) return Take::kFail;  // absent: a miss
  }
  const std::string_view block0 = std::string_view(replies[0].str).substr(0, store::kBlockSize);
  const std::string_view seal = replies.back().str;
  std::string why;
  if (seal.size() != Sealer::SealBytes(pages)) {
    // No seal where a sealed value has it: an unsealed record (shorter) or a damaged value.
    CountSeal(id.prefix_hash, l, replies[0].str.size() >= store::kBlockSize ? SealCheck::kUnsealed : SealCheck::kForged,
              "no seal");
    return Take::kFail;
  }
  if (const SealCheck s = sealer_.CheckHeader(ChunkKey(geo_.fingerprint, id.prefix_hash, l), block0, seal, &why);
      s != SealCheck::kOk) {
    CountSeal(id.prefix_hash, l, s, why);
    return Take::kFail;
  }
  auto h = CheckOrderedHeader(checker_, id, block0);
  if (!h.ok()) {
    if (h.status().code() == StatusCode::kNotFound) return Take::kTokenOrder;
    CountCorrupt(id.prefix_hash, l, h.status());
    return Take::kFail;
  }
  // Every fetched page against the header.
  std::vector<const std::string*> data;
  for (size_t q = 0; q < ranges.size(); ++q) {  // the data ranges (the seal's is last)
    const ByteRange& r = ranges[q];
    const std::string& got = replies[q].str;
    const uint64_t skip = q == 0 ? store::kBlockSize : 0;  // the first range starts with the header
    if (got.size() != r.last - r.first + 1) {
      CountCorrupt(id.prefix_hash, l, Status::Corruption("remote value shorter than its header says"));
      return Take::kFail;
    }
    for (uint64_t off = skip; off < got.size(); off += store::kBlockSize) {
      const uint32_t page = r.first_page + static_cast<uint32_t>((off - skip) / store::kBlockSize);
      if (!Sealer::PageOk(seal, page, std::string_view(got).substr(off, store::kBlockSize))) {
        CountSeal(id.prefix_hash, l, SealCheck::kForged, "payload page " + std::to_string(page) + " does not match its sealed digest");
        return Take::kFail;
      }
      if (!store::PageChecksumOk(*h, page, std::span(got.data() + off, store::kBlockSize))) {
        CountCorrupt(id.prefix_hash, l, Status::Corruption("payload page " + std::to_string(page) + " fails its checksum"));
        return Take::kFail;
      }
    }
    chunk->bytes += got.size();
    data.push_back(&got);
  }
  chunk->k[l].resize(keep * rb);
  chunk->v[l].resize(keep * rb);
  for (uint32_t row = 0; row < keep; ++row) {
    chunk->positions[l].push_back(h->tokens[row]);
    std::memcpy(chunk->k[l].data() + row * rb, At(ranges, data, row * rb), rb);
    std::memcpy(chunk->v[l].data() + row * rb, At(ranges, data, (C + row) * rb), rb);
  }
  chunk->value_bytes += store::kBlockSize * (1 + uint64_t{h->page_checksums.size()});
  return Take::kOk;
}

size_t RemoteTier::FetchWholeLayers(std::span<const int32_t> tokens, size_t start, std::span<const uint64_t> hashes,
                                    size_t first, const std::vector<std::pair<size_t, uint16_t>>& whole,
                                    std::vector<FarRows>* staged) {
  const uint32_t C = geo_.chunk_tokens;
  const size_t half = size_t{C} * geo_.row_bytes;
  std::vector<Command> cmds;
  for (const auto& [c, l] : whole) cmds.push_back({"GET", ChunkKey(geo_.fingerprint, hashes[first + c], l)});
  std::vector<Reply> replies;
  std::vector<ErrorKind> errors;
  RunCounted(&fetch_router_, cmds, &replies, &errors);
  size_t good = staged->size();
  for (size_t q = 0; q < whole.size(); ++q) {
    const auto [c, l] = whole[q];
    if (c >= good) break;
    const uint32_t pos = static_cast<uint32_t>(start + (first + c) * C);
    const ValueIdentity id{l, hashes[first + c], pos, C, tokens.subspan(pos, C)};
    Reply& r = replies[q];
    if (r.is_error()) CountErrorReply(r);
    // An error, an absent value, or one failing its seal or checks (counted): the run ends before it.
    if (errors[q] != ErrorKind::kNone || r.type != Reply::Type::kString || !TakeWhole(id, &r.str)) {
      good = c;
      break;
    }
    // Every row, in token order.
    FarRows& f = (*staged)[c];
    f.positions[l].resize(C);
    for (uint32_t row = 0; row < C; ++row) f.positions[l][row] = static_cast<int32_t>(pos + row);
    f.k[l].assign(r.str.data() + store::kBlockSize, half);
    f.v[l].assign(r.str.data() + store::kBlockSize + half, half);
    f.bytes += r.str.size();
    f.value_bytes += r.str.size();
  }
  return good;
}

}  // namespace tierkv::remote

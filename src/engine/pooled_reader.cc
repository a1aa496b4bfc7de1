#include "engine/pooled_reader.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/pool_entries.h"

namespace tierkv::engine {

Status PooledReader::ReadWholeLayer(const store::LookupResult& m, size_t R, int layer,
                                    std::string* k, std::string* v, IoCounts* io) {
  const size_t rb = g_.row_bytes;
  const uint32_t C = g_.chunk_tokens;
  k->assign(R * rb, '\0');
  v->assign(R * rb, '\0');
  // A whole record is K then V of the chunk's tokens; rows past R are not used.
  auto copy_rows = [&](size_t i, const char* payload) {
    const size_t first = i * C, tokens = m.chunk_tokens[i];
    const size_t used = std::min(tokens, R - first);
    std::memcpy(k->data() + first * rb, payload, used * rb);
    std::memcpy(v->data() + first * rb, payload + tokens * rb, used * rb);
  };
  std::vector<size_t> missed;
  std::vector<std::shared_ptr<std::vector<char>>> bufs;
  std::vector<cache::Pin> pins;  // keep what was copied alive until the copies are done
  for (size_t i = 0; i < (R + C - 1) / C; ++i) {
    const uint32_t rows = m.chunk_tokens[i];
    cache::Pin pin = pools_->Access(PoolKey(EntryKind::kWhole, m.prefix_hashes[i], layer), rows, rows);
    if (pin.tier() != cache::Tier::kDisk && pin.data()) {
      io->Hit(pin.tier());
      io->FromPool(pin.tier(), 2 * std::min<size_t>(rows, R - i * C) * rb);
      copy_rows(i, pin.data()->data());
      pins.push_back(std::move(pin));
      continue;
    }
    missed.push_back(i);
    bufs.push_back(std::make_shared<std::vector<char>>(2 * size_t{rows} * rb));
  }
  std::vector<store::ChunkRead> reads;
  for (size_t j = 0; j < missed.size(); ++j) {
    const size_t rows = m.chunk_tokens[missed[j]];
    reads.push_back(store::ChunkRead{m.chunks[missed[j]], m.prefix_hashes[missed[j]],
                                     static_cast<uint16_t>(layer), bufs[j]->data(),
                                     bufs[j]->data() + rows * rb});
  }
  store::RowReadStats rs;
  Status s = reads.empty() ? Status::Ok() : store_->Read(reads, &rs);
  io->bytes += rs.bytes;
  for (size_t j = 0; j < reads.size() && s.ok(); ++j) {
    if (!reads[j].status.ok()) return reads[j].status;
    ++io->disk_reads;
    ++io->records;
    copy_rows(missed[j], bufs[j]->data());
    pins.push_back(pools_->Admit(PoolKey(EntryKind::kWhole, m.prefix_hashes[missed[j]], layer),
                                 bufs[j]->size(), bufs[j]));
  }
  return s;
}

// One chunk's share of a selective read: its rows (chunk-local) and where
// they go in the output.
struct PooledReader::Group {
  size_t chunk = 0, first = 0;  // first: index in `rows` of the group's first row
  std::vector<uint16_t> local;
  uint64_t key = 0;
  cache::Pin pin;
  RowEntryView have;
  std::vector<uint16_t> missing;    // rows (K and/or V) the pool entry lacks
  std::vector<uint32_t> disk_rows;  // the others, read from disk into mk/mv
  std::string mk, mv;
};

std::vector<PooledReader::Group> PooledReader::GroupByChunk(std::span<const int32_t> rows) const {
  const uint32_t C = g_.chunk_tokens;
  std::vector<Group> groups;
  for (size_t i = 0; i < rows.size();) {
    Group g;
    g.chunk = static_cast<size_t>(rows[i]) / C;
    g.first = i;
    while (i < rows.size() && static_cast<size_t>(rows[i]) / C == g.chunk) {
      g.local.push_back(static_cast<uint16_t>(rows[i] - g.chunk * C));
      ++i;
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

std::vector<uint16_t> PooledReader::PlanGroup(const store::LookupResult& m, int layer, bool k,
                                              bool v, ReadFor who, const Supplied* supplied,
                                              size_t* si, Group* g, IoCounts* io) {
  const bool speculation = who == ReadFor::kSpeculation;
  const size_t rb = g_.row_bytes;
  g->key = PoolKey(EntryKind::kRows, m.prefix_hashes[g->chunk], layer);
  // A read ahead takes what the pools have without counting an access (it
  // may not be used); a request's own read is an access, and the chunk's
  // importance for the score policy is the share of its rows it needs.
  g->pin = speculation ? pools_->Peek(g->key)
                       : pools_->Access(g->key, static_cast<uint32_t>(g->local.size()),
                                        m.chunk_tokens[g->chunk]);
  g->have = EntryOf(g->pin);
  std::vector<uint16_t> from_disk;
  for (uint16_t r : g->local) {
    if (!((k && !g->have.K(r, rb)) || (v && !g->have.V(r, rb)))) continue;
    g->missing.push_back(r);
    const int32_t row = static_cast<int32_t>(g->chunk * g_.chunk_tokens + r);
    if (supplied) {
      while (*si < supplied->rows.size() && supplied->rows[*si] < row) ++*si;
      if (*si < supplied->rows.size() && supplied->rows[*si] == row) continue;  // the read ahead has it
    }
    from_disk.push_back(r);
  }
  const uint64_t per_row = rb * ((k ? 1 : 0) + (v ? 1 : 0));
  io->FromPool(g->pin.tier(), (g->local.size() - g->missing.size()) * per_row);
  // Hits and misses are the request's accesses: a read ahead counts none
  // (only its bytes); the layer that uses its rows counts a miss for a chunk
  // layer whose rows were not all in the pools.
  if (!speculation) {
    if (g->missing.empty()) {
      io->Hit(g->pin.tier());
    } else {
      ++io->disk_reads;
    }
  }
  return from_disk;
}

RowEntryView PooledReader::EntryOf(const cache::Pin& pin) const {
  if (pin.tier() == cache::Tier::kDisk || !pin.data()) return {};
  return ParseRowEntry(*pin.data(), g_.row_bytes);
}

std::span<const int32_t> PooledReader::SuppliedOf(const Supplied* supplied, size_t chunk) const {
  if (!supplied) return {};
  const int32_t C = static_cast<int32_t>(g_.chunk_tokens);
  const auto& rows = supplied->rows;
  auto lo = std::lower_bound(rows.begin(), rows.end(), static_cast<int32_t>(chunk) * C);
  auto hi = std::lower_bound(lo, rows.end(), static_cast<int32_t>(chunk + 1) * C);
  return {lo, hi};
}

void PooledReader::FinishGroup(Group& g, const std::vector<uint32_t>* disk_rows,
                               const Supplied* supplied, char* k, char* v, bool admit) {
  const size_t rb = g_.row_bytes;
  auto find = [](const auto& list, auto r) -> std::ptrdiff_t {
    auto it = std::lower_bound(list.begin(), list.end(), r);
    return it != list.end() && *it == r ? it - list.begin() : -1;
  };
  // The read ahead's rows of this chunk (used or not) and where they are.
  const std::span<const int32_t> ahead = SuppliedOf(supplied, g.chunk);
  const size_t ahead_at = supplied ? static_cast<size_t>(ahead.data() - supplied->rows.data()) : 0;
  const int32_t base = static_cast<int32_t>(g.chunk * g_.chunk_tokens);
  auto given = [&](uint16_t r) -> std::ptrdiff_t {
    const auto s = find(ahead, base + r);
    return s < 0 ? -1 : static_cast<std::ptrdiff_t>(ahead_at) + s;
  };
  auto row_k = [&](uint16_t r) -> const char* {
    if (const auto d = disk_rows ? find(*disk_rows, uint32_t{r}) : -1; d >= 0 && k) return g.mk.data() + d * rb;
    if (const auto s = given(r); s >= 0) return supplied->k->data() + s * rb;
    return g.have.K(r, rb);
  };
  auto row_v = [&](uint16_t r) -> const char* {
    if (const auto d = disk_rows ? find(*disk_rows, uint32_t{r}) : -1; d >= 0 && v) return g.mv.data() + d * rb;
    if (const auto s = given(r); s >= 0) return supplied->v->data() + s * rb;
    return g.have.V(r, rb);
  };
  for (size_t i = 0; i < g.local.size(); ++i) {
    if (k) std::memcpy(k + (g.first + i) * rb, row_k(g.local[i]), rb);
    if (v) std::memcpy(v + (g.first + i) * rb, row_v(g.local[i]), rb);
  }
  if (!admit) return;
  // The entry grows by what was read (verified by the store) and by every
  // row the read ahead brought of this chunk, used or not: a wrong
  // prediction kept is not read again by the next request.
  std::vector<uint16_t> extra;
  for (int32_t r : ahead) extra.push_back(static_cast<uint16_t>(r - base));
  std::vector<uint16_t> krows = UnionRows(g.have.krows, extra), vrows = UnionRows(g.have.vrows, extra);
  if (k) krows = UnionRows(krows, g.missing);
  if (v) vrows = UnionRows(vrows, g.missing);
  if (krows.size() == g.have.krows.size() && vrows.size() == g.have.vrows.size()) return;
  cache::Buffer e = BuildRowEntry(krows, vrows, rb, row_k, row_v);
  const uint64_t bytes = e->size();
  // An entry none of whose rows this read used holds only rows read ahead
  // for nothing: on the host at most, so that it pushes no used row off the
  // device.
  const cache::Tier highest = g.local.empty() ? cache::Tier::kHost : cache::Tier::kDevice;
  g.pin = pools_->Replace(g.key, bytes, std::move(e), highest);
}

void PooledReader::KeepReadAhead(const store::LookupResult& m, int layer,
                                 const std::vector<Group>& groups, const Supplied& supplied) {
  const uint32_t C = g_.chunk_tokens;
  size_t gi = 0;
  for (size_t i = 0; i < supplied.rows.size();) {
    Group g;
    g.chunk = static_cast<size_t>(supplied.rows[i]) / C;
    i += SuppliedOf(&supplied, g.chunk).size();
    while (gi < groups.size() && groups[gi].chunk < g.chunk) ++gi;
    if (gi < groups.size() && groups[gi].chunk == g.chunk) continue;  // FinishGroup kept them
    // A group using none of the chunk's rows: FinishGroup only grows its
    // entry by the read ahead's rows.
    g.key = PoolKey(EntryKind::kRows, m.prefix_hashes[g.chunk], layer);
    g.pin = pools_->Peek(g.key);
    g.have = EntryOf(g.pin);
    FinishGroup(g, nullptr, &supplied, nullptr, nullptr, /*admit=*/true);
  }
}

Status PooledReader::ReadSelected(const store::LookupResult& m, int layer,
                                  std::span<const int32_t> rows, char* k, char* v, ReadFor who,
                                  IoCounts* io, const Supplied* supplied) {
  const size_t rb = g_.row_bytes;
  std::vector<Group> groups = GroupByChunk(rows);
  std::vector<store::RowRead> reads;
  std::vector<size_t> read_group;  // the group of each read
  size_t si = 0;                   // walks supplied->rows (ascending, as `rows`)
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    Group& g = groups[gi];
    const std::vector<uint16_t> from_disk = PlanGroup(m, layer, k, v, who, supplied, &si, &g, io);
    if (from_disk.empty()) continue;
    g.disk_rows.assign(from_disk.begin(), from_disk.end());
    g.mk.assign(k ? from_disk.size() * rb : 0, '\0');
    g.mv.assign(v ? from_disk.size() * rb : 0, '\0');
    store::RowRead r;
    r.chunk = m.chunks[g.chunk];
    r.prefix_hash = m.prefix_hashes[g.chunk];
    r.layer = static_cast<uint16_t>(layer);
    r.rows = g.disk_rows;
    r.prefetch = who != ReadFor::kDemand;
    r.k = k ? g.mk.data() : nullptr;
    r.v = v ? g.mv.data() : nullptr;
    reads.push_back(r);
    read_group.push_back(gi);
  }
  if (!reads.empty()) {
    store::RowReadStats st;
    RETURN_IF_ERROR(store_->ReadRows(reads, &st));
    io->bytes += st.bytes;
    io->records += st.records;
    for (const store::RowRead& r : reads) RETURN_IF_ERROR(r.status);
  }
  // The read ahead's bytes are used only from here: it ran beside the reads above.
  if (supplied) RETURN_IF_ERROR(supplied->ready());
  // A read ahead leaves the pools alone: what it read enters them with the
  // layer that reads after it (as `supplied`), the rows that layer did not
  // use on the host at most, so rows predicted wrongly push no used row off
  // the device and are not read again by the next request.
  const bool admit = who != ReadFor::kSpeculation;
  for (Group& g : groups) {
    FinishGroup(g, g.disk_rows.empty() ? nullptr : &g.disk_rows, supplied, k, v, admit);
  }
  if (supplied && admit) KeepReadAhead(m, layer, groups, *supplied);
  return Status::Ok();
}

std::vector<int32_t> PooledReader::NotPooled(const store::LookupResult& m, int layer,
                                             std::span<const int32_t> rows) const {
  const size_t rb = g_.row_bytes;
  std::vector<int32_t> out;
  for (const Group& g : GroupByChunk(rows)) {
    const cache::Pin pin = pools_->Peek(PoolKey(EntryKind::kRows, m.prefix_hashes[g.chunk], layer));
    const RowEntryView have = EntryOf(pin);
    for (uint16_t r : g.local) {
      if (!have.K(r, rb) || !have.V(r, rb)) out.push_back(static_cast<int32_t>(g.chunk * g_.chunk_tokens + r));
    }
  }
  return out;
}

Status PooledReader::ReadProbes(const store::LookupResult& m, size_t R, int layer,
                                std::string* keys, IoCounts* io) {
  const uint32_t C = g_.chunk_tokens;
  const size_t pb = g_.probe_bytes;
  keys->assign(R * pb, '\0');
  std::vector<store::ProbeRead> reads;
  std::vector<size_t> read_chunk;
  for (size_t i = 0; i < R / C; ++i) {
    cache::Pin pin = pools_->Access(PoolKey(EntryKind::kProbe, m.prefix_hashes[i], layer), C, C);
    if (pin.tier() != cache::Tier::kDisk && pin.data()) {
      io->Hit(pin.tier());
      io->FromPool(pin.tier(), C * pb);
      std::memcpy(keys->data() + i * C * pb, pin.data()->data(), C * pb);
      continue;
    }
    ++io->disk_reads;
    reads.push_back(store::ProbeRead{m.chunks[i], m.prefix_hashes[i], static_cast<uint16_t>(layer),
                                     keys->data() + i * C * pb});
    read_chunk.push_back(i);
  }
  if (reads.empty()) return Status::Ok();
  store::RowReadStats st;
  RETURN_IF_ERROR(store_->ReadProbeKeys(reads, &st));
  io->bytes += st.bytes;
  io->records += st.records;
  for (const auto& r : reads) RETURN_IF_ERROR(r.status);
  for (size_t j = 0; j < reads.size(); ++j) {
    const char* src = keys->data() + read_chunk[j] * C * pb;
    pools_->Admit(PoolKey(EntryKind::kProbe, m.prefix_hashes[read_chunk[j]], layer), C * pb,
                  std::make_shared<std::vector<char>>(src, src + C * pb));
  }
  return Status::Ok();
}

}  // namespace tierkv::engine

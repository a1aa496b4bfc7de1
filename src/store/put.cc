// Put: plan under the index lock (evicting for room), write the records
// without it, make them durable, then publish them in the index.
#include <algorithm>
#include <unordered_map>

#include "store/store_impl.h"
#include "tierkv/logging.h"

namespace tierkv::store {
namespace {

// Chunks written per batch: their probe records of one layer are one read.
constexpr size_t kProbeBatchChunks = 16;

Status CheckPut(const StoreOptions& o, std::span<const int32_t> tokens, const KvInput& kv) {
  if (o.read_only) return Status::InvalidArgument("store put: the store was opened read-only");
  if (kv.k.size() != o.layers || kv.v.size() != o.layers) {
    return Status::InvalidArgument("store put: K/V for " + std::to_string(kv.k.size()) + "/" +
                                   std::to_string(kv.v.size()) + " layers, the store has " +
                                   std::to_string(o.layers));
  }
  if (kv.first_row > tokens.size()) {
    return Status::InvalidArgument("store put: first_row " + std::to_string(kv.first_row) +
                                   " is past the prompt's " + std::to_string(tokens.size()) +
                                   " tokens");
  }
  const size_t want = (tokens.size() - kv.first_row) * o.row_bytes;
  for (uint16_t l = 0; l < o.layers; ++l) {
    if (kv.k[l].size() != want || kv.v[l].size() != want) {
      return Status::InvalidArgument("store put: layer " + std::to_string(l) + " K/V holds " +
                                     std::to_string(kv.k[l].size()) + "/" +
                                     std::to_string(kv.v[l].size()) + " bytes, expected " +
                                     std::to_string(want));
    }
  }
  if (!kv.importance.empty()) {
    if (kv.importance.size() != o.layers) {
      return Status::InvalidArgument("store put: importance for " + std::to_string(kv.importance.size()) +
                                     " layers, the store has " + std::to_string(o.layers));
    }
    for (uint16_t l = 0; l < o.layers; ++l) {
      if (kv.importance[l].size() != tokens.size() - kv.first_row) {
        return Status::InvalidArgument("store put: layer " + std::to_string(l) + " importance has " +
                                       std::to_string(kv.importance[l].size()) + " rows, expected " +
                                       std::to_string(tokens.size() - kv.first_row));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

size_t ChunkStore::Impl::FitLocked(size_t start, size_t end) const {
  const uint32_t C = opts_.chunk_tokens;
  uint64_t room = opts_.disk_budget_bytes > live_bytes_ ? opts_.disk_budget_bytes - live_bytes_ : 0;
  size_t fit = start;
  while (fit < end) {
    const uint64_t b = ChunkRecordBytes(static_cast<uint32_t>(std::min<size_t>(C, end - fit)));
    if (b > room) break;
    room -= b;
    fit = std::min(end, fit + C);
  }
  return fit;
}

Result<ChunkStore::Impl::PutPlan> ChunkStore::Impl::PlanPutLocked(std::span<const int32_t> tokens,
                                                                  size_t first_row, uint64_t ns) {
  const uint32_t C = opts_.chunk_tokens;
  PutPlan plan;
  plan.ns = ns;
  plan.parent_hash = ns;  // a chunk at position 0: its namespace is its parent hash
  // The prompt's own stored prefix is the most recent: evicted last.
  for (uint32_t id : tree_.Lookup(tokens, ns).chunks) table_.Touch(id);
  // Evict until the new chunks fit. Eviction may still take the prompt's own
  // stored tail (when nothing else is left), so plan again after each round
  // until the plan holds.
  for (;;) {
    plan.start = tree_.PlanInsert(tokens, ns);
    plan.end = tokens.size();
    // The rows the plan needs were not given (a caller that loaded only some
    // of the prefix): store nothing rather than guess them.
    if (plan.start < first_row) return PutPlan{plan.start, plan.start, 0};
    uint64_t need = 0;
    for (size_t p = plan.start; p < plan.end; p += C) {
      need += ChunkRecordBytes(static_cast<uint32_t>(std::min<size_t>(C, plan.end - p)));
    }
    if (need == 0) break;
    if (EvictForLocked(need).ok()) {
      if (tree_.PlanInsert(tokens, ns) == plan.start) break;
      continue;  // our own prefix shrank: more to write
    }
    // Even an empty disk tier cannot hold all of it: store the prefix that fits.
    plan.start = tree_.PlanInsert(tokens, ns);
    if (plan.start < first_row) return PutPlan{plan.start, plan.start, 0};
    plan.end = FitLocked(plan.start, plan.end);
    break;
  }
  if (plan.start > 0 && plan.start < plan.end) {
    index::Match m = tree_.Lookup(tokens.first(plan.start), ns);
    if (m.matched_tokens != plan.start || m.chunks.empty()) {
      return Status::Corruption("store put: the plan and the index disagree");  // never expected
    }
    plan.parent_hash = tree_.chunk(m.chunks.back()).prefix_hash;
  }
  return plan;
}

RecordHeader ChunkStore::Impl::EncodeChunkRecord(RecordKind kind, uint16_t layer,
                                                 std::span<const int32_t> tokens, size_t p, uint32_t n,
                                                 uint64_t parent, uint64_t prefix_hash,
                                                 const std::string& payload, std::string* record) {
  RecordHeader h;
  h.fingerprint = opts_.fingerprint;
  h.kind = kind;
  h.dtype = opts_.dtype;
  h.layer = layer;
  h.first_token = static_cast<uint32_t>(p);
  h.token_count = n;
  h.row_bytes = kind == RecordKind::kProbeKeys ? opts_.probe_bytes : opts_.row_bytes;
  h.prefix_hash = prefix_hash;
  h.parent_hash = parent;
  h.sequence = ++sequence_;
  h.tokens.assign(tokens.begin() + p, tokens.begin() + p + n);
  EncodeRecord(h, payload, record);
  return h;
}

Status ChunkStore::Impl::WriteKeyValues(std::span<const int32_t> tokens, const KvInput& kv, size_t p,
                                        const std::vector<uint32_t>& ns, uint64_t* hash,
                                        std::vector<uint64_t>* parents,
                                        std::vector<Written>* written, uint64_t* bytes) {
  std::string payload, record;
  for (uint32_t n : ns) {
    const uint64_t parent = *hash;
    *hash = index::ChainHash(*hash, tokens.subspan(p, n));
    parents->push_back(parent);
    Written wr{*hash, Placed{std::vector<Location>(opts_.layers)}};
    for (uint16_t layer = 0; layer < opts_.layers; ++layer) {
      const size_t len = size_t{n} * opts_.row_bytes;
      payload.assign(kv.k[layer].data() + (p - kv.first_row) * opts_.row_bytes, len);
      payload.append(kv.v[layer].data() + (p - kv.first_row) * opts_.row_bytes, len);
      wr.headers.push_back(KnownHeader::Of(
          EncodeChunkRecord(RecordKind::kKeyValue, layer, tokens, p, n, parent, *hash, payload, &record)));
      wr.placed.where[layer] = writer_.Next();
      *bytes += record.size();
      RETURN_IF_ERROR(writer_.Append(record));
    }
    written->push_back(std::move(wr));
    p += n;
  }
  return Status::Ok();
}

Status ChunkStore::Impl::WriteProbes(std::span<const int32_t> tokens, const KvInput& kv, size_t p,
                                     const std::vector<uint32_t>& ns,
                                     const std::vector<uint64_t>& parents, Written* batch,
                                     uint64_t* bytes) {
  uint64_t stride = 0;
  for (uint32_t n : ns) stride += probe_record_bytes(n) / kBlockSize;
  std::string payload, record;
  for (uint16_t layer = 0; layer < opts_.layers; ++layer) {
    size_t q = p;
    for (size_t j = 0; j < ns.size(); ++j) {
      payload.clear();
      for (uint32_t t = 0; t < ns[j]; ++t) {
        payload.append(kv.k[layer].data() + (q + t - kv.first_row) * opts_.row_bytes, opts_.probe_bytes);
      }
      EncodeChunkRecord(RecordKind::kProbeKeys, layer, tokens, q, ns[j], parents[j],
                        batch[j].prefix_hash, payload, &record);
      if (layer == 0) {
        batch[j].placed.probe_block = writer_.Next().block;
        batch[j].placed.probe_stride = static_cast<uint16_t>(stride);
      }
      *bytes += record.size();
      RETURN_IF_ERROR(writer_.Append(record));
      q += ns[j];
    }
  }
  return Status::Ok();
}

Status ChunkStore::Impl::WriteChunks(std::span<const int32_t> tokens, const KvInput& kv,
                                     const PutPlan& plan, std::vector<Written>* written,
                                     uint64_t* bytes) {
  const uint32_t C = opts_.chunk_tokens;
  uint64_t hash = plan.parent_hash;
  size_t p = plan.start;
  while (p < plan.end) {
    if (!writer_.open()) RETURN_IF_ERROR(OpenSegment());
    // Plan the batch (at least one chunk; a new segment if it does not fit).
    std::vector<uint32_t> ns;
    uint64_t batch = 0;
    for (size_t q = p; q < plan.end && ns.size() < kProbeBatchChunks;) {
      const uint32_t n = static_cast<uint32_t>(std::min<size_t>(C, plan.end - q));
      const uint64_t b = ChunkRecordBytes(n);
      if (!ns.empty() && writer_.size() + batch + b > opts_.segment_bytes) break;
      ns.push_back(n);
      batch += b;
      q += n;
    }
    if (writer_.size() > 0 && writer_.size() + batch > opts_.segment_bytes) {
      RETURN_IF_ERROR(OpenSegment());
      continue;  // plan again for the empty segment
    }
    const size_t batch_start = written->size();
    std::vector<uint64_t> parents;
    RETURN_IF_ERROR(WriteKeyValues(tokens, kv, p, ns, &hash, &parents, written, bytes));
    if (opts_.probe_bytes != 0) {
      RETURN_IF_ERROR(WriteProbes(tokens, kv, p, ns, parents, written->data() + batch_start, bytes));
    }
    for (uint32_t n : ns) p += n;
  }
  return Status::Ok();
}

Result<PutResult> ChunkStore::Impl::Put(std::span<const int32_t> tokens, const KvInput& kv) {
  RETURN_IF_ERROR(CheckPut(opts_, tokens, kv));
  MutexLock w(&write_mu_);
  // Before anything is appended: the open segment may be a file no path
  // reaches any more (bytes written there would be lost silently).
  if (Status lost = CheckDirectoryHeld(); !lost.ok()) {
    Count([](StoreStats& st) { ++st.put_failures; });
    return lost.WithContext("store put");
  }
  uint64_t need = 0;
  Result<PutResult> out = PutOnce(tokens, kv, &need);
  if (!out.ok() && out.status().code() == StatusCode::kResourceExhausted) {
    // The file system is full, whatever the budget says (another tenant, a
    // budget larger than the disk): free the space on disk, then once more.
    TIERKV_LOG(kWarn) << "store " << opts_.dir << ": " << out.status().ToString()
                      << "; evicting and compacting for " << need << " bytes, then trying once more";
    Count([](StoreStats& st) { ++st.nospace_retries; });
    MakeRoomAfterNoSpace(need);
    out = PutOnce(tokens, kv, &need);
  }
  if (!out.ok()) Count([](StoreStats& st) { ++st.put_failures; });
  return out;
}

void ChunkStore::Impl::MakeRoomAfterNoSpace(uint64_t need) {
  // Dead bytes first (they cost no stored prefix), then the least valuable
  // chunks for what is still missing. Compaction writes a segment's live
  // records before deleting it, which a full disk may refuse; then whole
  // segments are emptied (the fewest live bytes first) and deleted, which
  // needs no space at all.
  uint64_t dead_before, disk_before;
  {
    MutexLock l(&mu_);
    dead_before = dead_bytes_;
    disk_before = live_bytes_ + dead_bytes_;
  }
  const auto freed = [&] {  // bytes of segment files deleted or cut since the start
    MutexLock l(&mu_);
    const uint64_t now = live_bytes_ + dead_bytes_;
    return disk_before > now ? disk_before - now : 0;
  };
  ReclaimDead(dead_before > need ? dead_before - need : 0);
  const uint64_t got = freed();
  if (got >= need) return;
  {
    MutexLock l(&mu_);
    // Nothing evictable left is no error here: the second try says what is possible.
    EvictUntilLocked(live_bytes_ > need - got ? live_bytes_ - (need - got) : 0).IgnoreError();
  }
  ReclaimDead(0);
  while (freed() < need) {
    {
      MutexLock l(&mu_);
      if (!EmptySegmentLocked()) return;
    }
    ReclaimDead(0);
  }
}

Result<PutResult> ChunkStore::Impl::PutOnce(std::span<const int32_t> tokens, const KvInput& kv,
                                            uint64_t* need) {
  PutResult out;
  PutPlan plan;
  {
    MutexLock l(&mu_);
    ASSIGN_OR_RETURN(plan, PlanPutLocked(tokens, kv.first_row, kv.cache_namespace));
    if (plan.start >= plan.end) {
      out.stored_tokens = tree_.Lookup(tokens, plan.ns).matched_tokens;
      return out;
    }
    *need = 0;
    for (size_t p = plan.start; p < plan.end; p += opts_.chunk_tokens) {
      *need += ChunkRecordBytes(static_cast<uint32_t>(std::min<size_t>(opts_.chunk_tokens, plan.end - p)));
    }
  }
  // Dead bytes past their share are compacted before this write adds to
  // the files, so that live + dead stays within the budget; down to half
  // of it, so that compaction runs once per max_dead_bytes / 2 evicted.
  bool over;
  {
    MutexLock l(&mu_);
    over = opts_.max_dead_bytes != 0 && dead_bytes_ > opts_.max_dead_bytes;
  }
  if (over) ReclaimDead(opts_.max_dead_bytes / 2);
  const WriteMark mark = Mark();
  std::vector<Written> written;
  Status s = WriteChunks(tokens, kv, plan, &written, &out.bytes_written);
  if (s.ok()) s = writer_.Sync();
  if (!s.ok()) {
    // Nothing is published, and nothing of this write is left on disk.
    ReclaimFailedWrite(mark, out.bytes_written);
    return s.WithContext("store put");
  }
  {
    MutexLock l(&mu_);
    index::InsertResult r = tree_.Insert(tokens.first(plan.end), plan.ns);
    std::unordered_map<uint64_t, const Written*> by_hash;
    for (const Written& wr : written) by_hash[wr.prefix_hash] = &wr;
    ASSIGN_OR_RETURN(Published pub, PublishLocked(r.created, [&](uint64_t hash) {
                       auto it = by_hash.find(hash);
                       return it == by_hash.end() ? nullptr : &it->second->placed;
                     }));
    out.new_chunks = pub.chunks;
    dead_bytes_ += out.bytes_written - pub.bytes;
    for (Written& wr : written) {
      for (uint16_t l = 0; l < opts_.layers; ++l) known_headers_.Put(wr.placed.where[l], std::move(wr.headers[l]));
    }
    dirty_ = true;
    out.stored_tokens = tree_.Lookup(tokens, plan.ns).matched_tokens;
  }
  if (!kv.importance.empty()) out.bytes_written += WriteOrderedCopies(tokens, kv, plan, written);
  Count([&](StoreStats& st) {
    ++st.puts;
    st.records_written += written.size() * opts_.layers * (opts_.probe_bytes != 0 ? 2 : 1);
    st.bytes_written += out.bytes_written;
  });
  return out;
}

uint64_t ChunkStore::Impl::WriteOrderedCopies(std::span<const int32_t> tokens, const KvInput& kv,
                                              const PutPlan& plan, const std::vector<Written>& written) {
  // The chunks are stored already: the copies only speed up selective
  // reads, so a failure (a full disk) costs them and nothing else.
  std::vector<PutRun> runs;
  uint64_t bytes = 0;
  if (opts_.disk_budget_bytes != 0) {
    // Copies the budget cannot hold would only be dead bytes: not written.
    uint64_t copies = 0;
    for (size_t p = plan.start; p < plan.end; p += opts_.chunk_tokens) {
      copies += opts_.layers * record_bytes(static_cast<uint32_t>(std::min<size_t>(opts_.chunk_tokens, plan.end - p)));
    }
    MutexLock l(&mu_);
    if (live_bytes_ + copies > opts_.disk_budget_bytes) return 0;
  }
  const WriteMark mark = Mark();
  Status s = WritePutRuns(kv, plan, written, &runs, &bytes);
  if (s.ok()) s = writer_.Sync();
  if (!s.ok()) {
    TIERKV_LOG(kWarn) << "store put: the importance-ordered copy was not written: " << s.ToString();
    ReclaimFailedWrite(mark, bytes);
    return 0;
  }
  MutexLock l(&mu_);
  dead_bytes_ += InstallPutRunsLocked(tokens, kv, plan, runs);
  return bytes;
}

}  // namespace tierkv::store

#include "store/recovery.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <set>
#include <tuple>

#include "store/cache_dir.h"
#include "store/manifest.h"
#include "store/store_impl.h"
#include "tierkv/logging.h"

namespace tierkv::store {
namespace {

// Recovery reads segments through a window of this many bytes.
constexpr size_t kScanWindow = 4u << 20;

}  // namespace

bool Complete(const FoundChunk& f) {
  if (!f.consistent) return false;
  for (const ChunkStore::Location& w : f.where) {
    if (w.segment == 0) return false;
  }
  return true;
}

std::unordered_map<uint64_t, bool> UsableChunks(const RecoveryPlan& plan, uint32_t chunk_tokens) {
  std::unordered_map<uint64_t, bool> usable;
  std::function<bool(uint64_t)> chain_ok = [&](uint64_t hash) -> bool {
    auto u = usable.find(hash);
    if (u != usable.end()) return u->second;
    auto it = plan.found.find(hash);
    bool ok = false;
    if (it != plan.found.end() && Complete(it->second)) {
      const FoundChunk& f = it->second;
      if (f.first_token == 0) {
        ok = true;  // a prompt's first chunk: its parent hash is its namespace
      } else {
        auto p = plan.found.find(f.parent_hash);
        ok = p != plan.found.end() && p->second.tokens == chunk_tokens &&
             p->second.first_token + p->second.tokens == f.first_token && chain_ok(f.parent_hash);
      }
    }
    usable[hash] = ok;
    return ok;
  };
  for (const auto& [hash, f] : plan.found) chain_ok(hash);
  return usable;
}

void PlaceProbes(FoundChunk* f, uint16_t layers, bool probes) {
  f->placed.where = f->where;
  if (f->probe.empty() || f->where.empty() || !probes) return;
  const int64_t stride = layers > 1 ? int64_t{f->probe[1].block} - f->probe[0].block : 0;
  bool ok = stride >= 0 && stride <= UINT16_MAX;
  for (uint16_t l = 0; l < layers && ok; ++l) {
    ok = f->probe[l].segment != 0 && f->probe[l].segment == f->where[0].segment &&
         f->probe[l].block == f->probe[0].block + l * stride;
  }
  if (ok) {
    f->placed.probe_block = f->probe[0].block;
    f->placed.probe_stride = static_cast<uint16_t>(stride);
  }
}

void ChunkStore::Impl::ReadManifest(RecoveryPlan* plan) {
  const std::string path = opts_.dir + "/" + kManifestFile;
  if (!fs_->FileExists(path)) return;
  auto text = ReadFileToString(fs_, path);
  Result<Manifest> m = text.ok() ? DecodeManifest(*text) : Result<Manifest>(text.status());
  if (m.ok() && (m->fingerprint != opts_.fingerprint || m->layers != opts_.layers ||
                 m->chunk_tokens != opts_.chunk_tokens)) {
    m = Status::Corruption("manifest: written for another model or geometry");
  }
  if (!m.ok()) {
    plan->manifest_errors = 1;
    TIERKV_LOG(kWarn) << "store " << opts_.dir << ": " << m.status().ToString()
                      << "; recovering from every segment instead";
    return;
  }
  plan->log_from = m->log_from;
  plan->sequence = std::max(plan->sequence, m->sequence);
  const std::set<uint32_t> existing(plan->segments.begin(), plan->segments.end());
  std::set<uint32_t> used;
  for (uint32_t seg : m->segments) {
    if (existing.count(seg)) used.insert(seg);
  }
  for (uint32_t seg : plan->segments) {
    if (seg >= plan->log_from) continue;
    (used.count(seg) ? plan->used : plan->garbage).push_back(seg);
  }
  for (const ManifestChunk& c : m->chunks) {
    bool ok = true;
    for (const auto& w : c.where) ok = ok && used.count(w.first) > 0;
    if (!ok) continue;  // cannot happen unless files were removed by hand
    FoundChunk& f = plan->found[c.prefix_hash];
    f.first_token = c.first_token;
    f.tokens = static_cast<uint32_t>(c.tokens.size());
    f.parent_hash = c.parent_hash;
    f.token_ids = c.tokens;
    f.where.clear();
    for (const auto& w : c.where) f.where.push_back(Location{w.first, w.second});
    f.seq.assign(opts_.layers, 0);  // any copy in the log is newer
    f.probe.assign(opts_.layers, Location{});
    f.probe_seq.assign(opts_.layers, 0);
    if (c.probe_block != ChunkTable::kNoProbe && opts_.probe_bytes != 0) {
      for (uint16_t l = 0; l < opts_.layers; ++l) {
        f.probe[l] = Location{f.where[0].segment, c.probe_block + l * uint32_t{c.probe_stride}};
      }
    }
    f.init = true;
    ++plan->manifest_chunks;
    if (c.pages > 0) plan->known_pages[c.prefix_hash] = {f.where, c.pages, c.page_checksums};
  }
  for (ManifestRun& r : m->runs) {
    bool ok = true;
    for (const auto& w : r.where) ok = ok && used.count(w.first) > 0;
    if (ok) plan->runs.push_back(std::move(r));
  }
}

void ChunkStore::Impl::KnowRecoveredHeadersLocked(const RecoveryPlan& plan) {
  for (uint32_t id : tree_.LiveChunks()) {
    const index::ChunkInfo& c = tree_.chunk(id);
    auto it = plan.known_pages.find(c.prefix_hash);
    if (it == plan.known_pages.end()) continue;
    const RecoveryPlan::KnownPages& k = it->second;
    for (uint16_t layer = 0; layer < opts_.layers && layer < k.where.size(); ++layer) {
      const Location at = table_.LocationOf(id, layer);
      // Only a record still where the snapshot saw it (the log may hold a newer copy).
      if (at.segment != k.where[layer].segment || at.block != k.where[layer].block) continue;
      const auto sums = k.sums.begin() + size_t{layer} * k.pages;
      known_headers_.Put(at, KnownHeader{RecordKind::kKeyValue, layer, c.prefix_hash, c.first_token, c.tokens,
                                         std::vector<uint64_t>(sums, sums + k.pages)});
    }
  }
}

void ChunkStore::Impl::InstallRecoveredRunsLocked(const RecoveryPlan& plan) {
  const uint32_t C = opts_.chunk_tokens;
  const uint16_t L = opts_.layers;
  uint64_t installed = 0;
  if (plan.runs.empty()) return;
  std::unordered_map<uint64_t, uint32_t> id_of;
  for (uint32_t id : tree_.LiveChunks()) id_of[tree_.chunk(id).prefix_hash] = id;
  for (const ManifestRun& mr : plan.runs) {
    auto run = std::make_shared<Run>();
    run->chunk_tokens = C;
    run->first_token = mr.first_token;
    run->rows = mr.rows;
    run->records = mr.records;
    run->end_hash = mr.end_hash;
    run->parent_hash = mr.parent_hash;
    run->hashes = mr.hashes;
    // Its chunks must all be back, in order, covering its rows exactly.
    bool ok = true;
    uint32_t rows = 0;
    for (uint64_t h : mr.hashes) {
      auto it = id_of.find(h);
      ok = it != id_of.end() && tree_.chunk(it->second).first_token == mr.first_token + rows;
      const uint32_t id = ok ? it->second : index::kNoChunk;
      if (!ok) break;
      run->chunks.push_back(id);
      rows += tree_.chunk(id).tokens;
    }
    if (!ok || rows != mr.rows) continue;
    std::vector<std::vector<uint32_t>> orders(L, std::vector<uint32_t>(mr.rows));
    for (uint16_t l = 0; l < L && ok; ++l) {
      for (uint32_t row = 0; row < mr.rows && ok; ++row) {
        const uint32_t slot = mr.slot_of[size_t{l} * mr.rows + row];
        ok = slot < mr.rows;
        if (ok) orders[l][slot] = row;
      }
    }
    auto map = ok ? index::MappingList::FromOrders(orders) : Result<index::MappingList>(Status::Corruption(""));
    if (!map.ok()) continue;  // not a permutation: the copy is dead bytes
    run->map = std::move(map).value();
    for (const auto& [seg, block] : mr.where) run->where.push_back(Location{seg, block});
    for (uint32_t i = 0; i < run->records; ++i) run->bytes += L * record_bytes(run->RecordTokens(i));
    if (InstallRunLocked(run, 0, {})) ++installed;
  }
  Count([&](StoreStats& s) { s.recovered_runs = installed; });
}

Status ChunkStore::Impl::DeleteGarbage(const RecoveryPlan& plan) {
  if (plan.garbage.empty() || opts_.read_only) return Status::Ok();
  for (uint32_t seg : plan.garbage) {
    TIERKV_LOG(kInfo) << "store " << opts_.dir << ": removing " << SegmentPath(seg)
                      << " (no longer used since the last compaction)";
    RETURN_IF_ERROR(fs_->DeleteFile(SegmentPath(seg)));
  }
  return fs_->SyncDir(opts_.dir);
}

void ChunkStore::Impl::Found(const RecordHeader& h, Location at, RecoveryPlan* plan) const {
  const bool probe = h.kind == RecordKind::kProbeKeys;
  FoundChunk& f = plan->found[h.prefix_hash];
  if (!f.init) {
    f.init = true;
    f.first_token = h.first_token;
    f.tokens = h.token_count;
    f.parent_hash = h.parent_hash;
    f.token_ids = h.tokens;
    f.where.assign(opts_.layers, Location{});
    f.seq.assign(opts_.layers, 0);
    f.probe.assign(opts_.layers, Location{});
    f.probe_seq.assign(opts_.layers, 0);
  } else if (f.first_token != h.first_token || f.tokens != h.token_count ||
             f.parent_hash != h.parent_hash || f.token_ids != h.tokens) {
    f.consistent = false;  // a hash collision or a forged record: use none of it
  }
  if (probe && h.sequence >= f.probe_seq[h.layer]) {
    f.probe_seq[h.layer] = h.sequence;
    f.probe[h.layer] = at;
  } else if (!probe && h.sequence >= f.seq[h.layer]) {
    f.seq[h.layer] = h.sequence;
    f.where[h.layer] = at;
  }
  plan->sequence = std::max(plan->sequence, h.sequence);
}

namespace {

// A segment read through a window of whole blocks.
struct ScanWindow {
  const RandomAccessFile* file;
  uint64_t size;  // the segment's bytes
  AlignedBuffer buf = AllocateAligned(kScanWindow);
  size_t buf_size = kScanWindow;
  uint64_t start = 0, len = 0;

  bool Holds(uint64_t at, uint64_t need) const { return at >= start && at + need <= start + len; }
  // Reads from `at` on (at least `need` bytes of buffer).
  Status Fill(ChunkStore::Impl& store, uint64_t at, size_t need) {
    if (need > buf_size) {
      buf = AllocateAligned(need);
      buf_size = need;
    }
    ReadOp op{file, at, std::min<uint64_t>(buf_size, size - at), buf.get()};
    op.length = (op.length + kBlockSize - 1) / kBlockSize * kBlockSize;
    RETURN_IF_ERROR(store.ReadOnMain(std::span<ReadOp>(&op, 1)));
    RETURN_IF_ERROR(op.status);
    start = at;
    len = op.done / kBlockSize * kBlockSize;
    return Status::Ok();
  }
  const char* At(uint64_t at) const { return buf.get() + (at - start); }
};

}  // namespace

Status ChunkStore::Impl::ScanSegment(uint32_t seg, RecoveryPlan* plan) {
  std::shared_ptr<RandomAccessFile> file;
  {
    MutexLock l(&mu_);
    ASSIGN_OR_RETURN(file, ReaderForLocked(seg));
  }
  ASSIGN_OR_RETURN(uint64_t size, file->Size());
  plan->total_bytes += size / kBlockSize * kBlockSize;
  ScanWindow w{file.get(), size};
  uint64_t cursor = 0;
  while (cursor + kBlockSize <= size) {
    if (!w.Holds(cursor, kBlockSize)) {
      RETURN_IF_ERROR(w.Fill(*this, cursor, kScanWindow).WithContext("store recovery, " + SegmentPath(seg)));
      if (w.len < kBlockSize) break;
    }
    auto header = DecodeHeader(std::span<const char, kBlockSize>(w.At(cursor), kBlockSize));
    if (!header.ok()) {
      // Not a record start (torn write, garbage): resynchronise at the next block.
      ++plan->skipped;
      cursor += kBlockSize;
      continue;
    }
    const RecordHeader& h = *header;
    const uint64_t len = uint64_t{kBlockSize} * (1 + h.page_checksums.size());
    if (cursor + len > size) {
      ++plan->skipped;  // torn tail
      break;
    }
    if (!w.Holds(cursor, len)) RETURN_IF_ERROR(w.Fill(*this, cursor, std::max<size_t>(kScanWindow, len)));
    const char* block = w.At(cursor);
    bool pages_ok = true;
    for (uint32_t p = 0; p < h.page_checksums.size() && pages_ok; ++p) {
      pages_ok = PageChecksumOk(h, p, {block + kBlockSize * (1 + size_t{p}), kBlockSize});
    }
    const bool probe = h.kind == RecordKind::kProbeKeys;
    const bool ours = h.fingerprint == opts_.fingerprint &&
                      (h.kind == RecordKind::kKeyValue || (probe && opts_.probe_bytes != 0)) &&
                      h.layer < opts_.layers &&
                      h.row_bytes == (probe ? opts_.probe_bytes : opts_.row_bytes) &&
                      h.dtype == opts_.dtype && h.token_count <= opts_.chunk_tokens &&
                      h.first_token % opts_.chunk_tokens == 0;
    if (pages_ok && h.fingerprint == opts_.fingerprint && h.kind == RecordKind::kReorderedKeyValue) {
      cursor += len;  // a reordered copy: layouts are not recovered (dead bytes)
      continue;
    }
    if (!pages_ok || !ours) {
      ++plan->skipped;
      cursor += pages_ok ? len : kBlockSize;
      continue;
    }
    Found(h, Location{seg, static_cast<uint32_t>(cursor / kBlockSize)}, plan);
    cursor += len;
  }
  return Status::Ok();
}

Status ChunkStore::Impl::ApplyLocked(RecoveryPlan& plan) {
  const std::unordered_map<uint64_t, bool> usable = UsableChunks(plan, opts_.chunk_tokens);
  std::unordered_map<uint64_t, bool> is_parent;
  for (auto& [hash, f] : plan.found) {
    if (usable.at(hash) && f.first_token != 0) is_parent[f.parent_hash] = true;
    PlaceProbes(&f, opts_.layers, opts_.probe_bytes != 0);
  }
  // Insert every leaf's whole prompt, shortest first (deterministic ids).
  std::vector<uint64_t> leaves;
  for (const auto& [hash, f] : plan.found) {
    if (usable.at(hash) && !is_parent.count(hash)) leaves.push_back(hash);
  }
  auto& found = plan.found;
  std::sort(leaves.begin(), leaves.end(), [&](uint64_t a, uint64_t b) {
    const FoundChunk &fa = found.at(a), &fb = found.at(b);
    return std::tie(fa.first_token, fa.tokens, a) < std::tie(fb.first_token, fb.tokens, b);
  });
  uint64_t recovered = 0;
  for (uint64_t leaf : leaves) {
    std::vector<const FoundChunk*> chain;
    for (uint64_t h = leaf;; h = found.at(h).parent_hash) {
      chain.push_back(&found.at(h));
      if (chain.back()->first_token == 0) break;
    }
    const uint64_t ns = chain.back()->parent_hash;
    std::vector<int32_t> prompt;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      prompt.insert(prompt.end(), (*it)->token_ids.begin(), (*it)->token_ids.end());
    }
    index::InsertResult r = tree_.Insert(prompt, ns);
    ASSIGN_OR_RETURN(Published p, PublishLocked(r.created, [&](uint64_t hash) {
                       auto it = found.find(hash);
                       return it == found.end() ? nullptr : &it->second.placed;
                     }));
    recovered += p.chunks;
  }
  Count([&](StoreStats& s) { s.recovered_chunks = recovered; });
  return Status::Ok();
}

Status ChunkStore::Impl::RemoveDeadSegments(RecoveryPlan* plan) {
  if (opts_.read_only) return Status::Ok();
  std::vector<uint32_t> dead;
  {
    MutexLock l(&mu_);
    const std::unordered_map<uint32_t, uint64_t> live = LiveBytesBySegmentLocked();
    const std::set<uint32_t> garbage(plan->garbage.begin(), plan->garbage.end());  // deleted already
    for (uint32_t seg : plan->segments) {
      if (!garbage.count(seg) && !live.count(seg)) dead.push_back(seg);
    }
    for (uint32_t seg : dead) {
      if (seg < readers_.size()) readers_[seg].reset();
    }
    // The manifest may list them: the next one will not.
    if (!dead.empty()) dirty_ = true;
  }
  uint64_t removed = 0;
  for (uint32_t seg : dead) {
    ASSIGN_OR_RETURN(uint64_t size, fs_->FileSize(SegmentPath(seg)));
    RETURN_IF_ERROR(fs_->DeleteFile(SegmentPath(seg)));
    plan->total_bytes -= std::min(plan->total_bytes, size / kBlockSize * kBlockSize);
    --segment_count_;
    ++removed;
  }
  if (removed > 0) {
    TIERKV_LOG(kInfo) << "store " << opts_.dir << ": removed " << removed
                      << " segments that held no live record (empty, failed or evicted writes)";
    Count([&](StoreStats& s) { s.removed_segments = removed; });
    return fs_->SyncDir(opts_.dir);
  }
  return Status::Ok();
}

Status ChunkStore::Impl::Recover() {
  const auto t0 = std::chrono::steady_clock::now();
  RecoveryPlan plan;
  ASSIGN_OR_RETURN(plan.segments, ListSegments(fs_, opts_.dir));
  // The manifest's snapshot first; then the segments written after it.
  ReadManifest(&plan);
  for (uint32_t seg : plan.used) {
    ASSIGN_OR_RETURN(uint64_t size, fs_->FileSize(SegmentPath(seg)));
    plan.total_bytes += size / kBlockSize * kBlockSize;
  }
  RETURN_IF_ERROR(DeleteGarbage(plan));
  for (uint32_t seg : plan.segments) {
    if (std::find(plan.garbage.begin(), plan.garbage.end(), seg) != plan.garbage.end()) continue;
    RETURN_IF_ERROR(OpenReader(seg).WithContext("store recovery"));
  }
  for (uint32_t seg : plan.segments) {
    if (seg < plan.log_from) continue;
    ++plan.scanned;
    RETURN_IF_ERROR(ScanSegment(seg, &plan));
  }
  {
    MutexLock w(&write_mu_);
    sequence_ = plan.sequence;
    // Segment numbers are never used twice: a segment deleted as dead (or
    // after a failed write) may have been the newest, and a manifest's
    // log_from already counts it. A new segment numbered below log_from
    // would be taken for one the manifest forgot, and deleted as garbage
    // at the next open (acknowledged prompts lost after a kill -9).
    const uint32_t newest = plan.segments.empty() ? 0 : plan.segments.back();
    writer_.SetLast(std::max(newest, plan.log_from - 1));
  }
  segment_count_ = plan.segments.size() - (opts_.read_only ? 0 : plan.garbage.size());
  {
    MutexLock l(&mu_);
    RETURN_IF_ERROR(ApplyLocked(plan));
    InstallRecoveredRunsLocked(plan);
    KnowRecoveredHeadersLocked(plan);
  }
  if (Status s = RemoveDeadSegments(&plan); !s.ok()) {
    // Only space is lost: the next open tries again.
    TIERKV_LOG(kWarn) << "store " << opts_.dir << ": removing segments without live records: " << s.ToString();
  }
  {
    MutexLock l(&mu_);
    dead_bytes_ = plan.total_bytes > live_bytes_ ? plan.total_bytes - live_bytes_ : 0;
    if (plan.scanned > 0) dirty_ = true;  // so that the next open need not scan them again
  }
  Count([&](StoreStats& s) {
    s.manifest_chunks = plan.manifest_chunks;
    s.manifest_errors = plan.manifest_errors;
    s.scanned_segments = plan.scanned;
    s.skipped_records = plan.skipped;
    s.recovery_us = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                              std::chrono::steady_clock::now() - t0)
                                              .count());
  });
  if (plan.skipped > 0) {
    TIERKV_LOG(kWarn) << "store " << opts_.dir << ": recovery skipped " << plan.skipped
                      << " unusable blocks or records (torn writes, corruption, other models)";
  }
  return Status::Ok();
}

}  // namespace tierkv::store

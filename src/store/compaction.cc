// Compaction: every sealed segment whose dead share is at least the given
// fraction has its live records (verified) copied to the active segment;
// once the copies are durable the index points at them, a new manifest is
// written, and the old segments are deleted. Readers never wait on its I/O
// and never see a half-moved chunk.
#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "store/cache_dir.h"
#include "store/store_impl.h"
#include "tierkv/logging.h"

namespace tierkv::store {
namespace {

// One live record to copy out of a victim segment.
struct Move {
  uint32_t chunk;
  uint16_t layer;
  uint64_t prefix_hash;
  uint32_t first_token, tokens;
  Location from, to;
  AlignedBuffer buf;
  std::shared_ptr<RandomAccessFile> file;
  Status status;
  std::shared_ptr<const Run> run;  // a reordered run's record where[run_index]
  uint32_t run_index = 0;
  bool probe = false;              // the chunk's probe record of `layer`
};

struct CompactPlan {
  std::vector<Move> moves;
  std::set<uint32_t> victims;
  uint64_t victim_bytes = 0;
};

// Each reordered run once.
std::vector<std::shared_ptr<const Run>> AllRuns(const ChunkStore::Impl& s) TIERKV_REQUIRES(s.mu_) {
  return s.runs_.Runs();
}

// Live bytes per segment: chunks' records, probe copies, reordered runs.
std::unordered_map<uint32_t, uint64_t> LiveBytes(const ChunkStore::Impl& s,
                                                 const std::vector<std::shared_ptr<const Run>>& runs)
    TIERKV_REQUIRES(s.mu_) {
  std::unordered_map<uint32_t, uint64_t> live;
  for (uint32_t id : s.tree_.LiveChunks()) {
    const uint32_t n = s.tree_.chunk(id).tokens;
    for (uint16_t layer = 0; layer < s.opts_.layers; ++layer) {
      live[s.table_.LocationOf(id, layer).segment] += s.record_bytes(n);
    }
    const Location probe = s.table_.ProbeLocationOf(id, 0);
    if (probe.segment != 0) live[probe.segment] += s.opts_.layers * s.probe_record_bytes(n);
  }
  for (const auto& run : runs) {
    for (uint32_t i = 0; i < run->where.size(); ++i) {
      live[run->where[i].segment] += s.record_bytes(run->RecordTokens(i % run->records));
    }
  }
  return live;
}

// A move of `bytes` from `at`, with its segment's reader.
Result<Move> NewMove(ChunkStore::Impl& s, uint32_t chunk, uint16_t layer, uint64_t hash,
                     uint32_t first, uint32_t tokens, Location at, uint64_t bytes) TIERKV_REQUIRES(s.mu_) {
  auto file = s.ReaderForLocked(at.segment);
  if (!file.ok()) return file.status().WithContext("store compact");
  return Move{chunk, layer, hash, first, tokens, at, Location{}, AllocateAligned(bytes), *file, Status::Ok()};
}

// The chunks' records (and their probe copies, which follow the K/V) in victims.
Status PlanChunkMoves(ChunkStore::Impl& s, CompactPlan* plan) TIERKV_REQUIRES(s.mu_) {
  for (uint32_t id : s.tree_.LiveChunks()) {
    const index::ChunkInfo& c = s.tree_.chunk(id);
    for (uint16_t layer = 0; layer < s.opts_.layers; ++layer) {
      const Location at = s.table_.LocationOf(id, layer);
      if (!plan->victims.count(at.segment)) continue;
      ASSIGN_OR_RETURN(Move m, NewMove(s, id, layer, c.prefix_hash, c.first_token, c.tokens, at,
                                       s.record_bytes(c.tokens)));
      plan->moves.push_back(std::move(m));
    }
    const Location probe = s.table_.ProbeLocationOf(id, 0);
    if (probe.segment == 0 || !plan->victims.count(probe.segment)) continue;
    for (uint16_t layer = 0; layer < s.opts_.layers; ++layer) {
      ASSIGN_OR_RETURN(Move m, NewMove(s, id, layer, c.prefix_hash, c.first_token, c.tokens,
                                       s.table_.ProbeLocationOf(id, layer), s.probe_record_bytes(c.tokens)));
      m.probe = true;
      plan->moves.push_back(std::move(m));
    }
  }
  return Status::Ok();
}

Status PlanRunMoves(ChunkStore::Impl& s, const std::vector<std::shared_ptr<const Run>>& runs,
                    CompactPlan* plan) TIERKV_REQUIRES(s.mu_) {
  for (const auto& run : runs) {
    for (uint32_t i = 0; i < run->where.size(); ++i) {
      const Location at = run->where[i];
      if (!plan->victims.count(at.segment)) continue;
      const uint32_t n = run->RecordTokens(i % run->records);
      ASSIGN_OR_RETURN(Move m, NewMove(s, run->chunks[0], static_cast<uint16_t>(i / run->records),
                                       run->end_hash, run->first_token, n, at, s.record_bytes(n)));
      m.run = run;
      m.run_index = i;
      plan->moves.push_back(std::move(m));
    }
  }
  return Status::Ok();
}

// Victims (segments at least min_dead_fraction dead; at most max_victims,
// the largest dead share first) and their live records.
Status PlanLocked(ChunkStore::Impl& s, const std::vector<uint32_t>& segments,
                  const std::vector<uint64_t>& sizes, double min_dead_fraction, size_t max_victims,
                  CompactPlan* plan) TIERKV_REQUIRES(s.mu_) {
  const std::vector<std::shared_ptr<const Run>> runs = AllRuns(s);
  std::unordered_map<uint32_t, uint64_t> live = LiveBytes(s, runs);
  std::vector<std::pair<double, size_t>> candidates;  // dead share, index
  for (size_t i = 0; i < segments.size(); ++i) {
    const uint64_t size = sizes[i], l_bytes = live.count(segments[i]) ? live[segments[i]] : 0;
    const double dead = static_cast<double>(size - std::min(size, l_bytes));
    if (size == 0 || (dead > 0 && dead >= min_dead_fraction * static_cast<double>(size))) {
      candidates.emplace_back(size == 0 ? 1.0 : dead / static_cast<double>(size), i);
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  if (candidates.size() > max_victims) candidates.resize(max_victims);
  for (const auto& [share, i] : candidates) {
    plan->victims.insert(segments[i]);
    plan->victim_bytes += sizes[i];
  }
  if (plan->victims.empty()) return Status::Ok();
  RETURN_IF_ERROR(PlanChunkMoves(s, plan));
  return PlanRunMoves(s, runs, plan);
}

// What a moved record must be.
Expect ExpectOf(const ChunkStore::Impl& s, const Move& m) {
  Expect e = KeyValueExpect(m.layer, m.prefix_hash, m.first_token, m.tokens);
  if (m.run) {
    e.kind = RecordKind::kReorderedKeyValue;
    e.run = m.run.get();
    e.run_record = m.run_index % m.run->records;
  } else if (m.probe) {
    e.kind = RecordKind::kProbeKeys;
    e.row_bytes = s.opts_.probe_bytes;
  }
  return e;
}

// Reads and verifies the live records (no index lock held) and appends the
// good ones (m.to); a chunk's K/V and probe records, or a run's records, are
// one unit: a new segment only between units. *appended: bytes written.
Status CopyMoves(ChunkStore::Impl& s, std::vector<Move>& moves, uint64_t* appended)
    TIERKV_REQUIRES(s.write_mu_) {
  std::vector<ReadOp> ops;
  for (Move& m : moves) {
    ReadOp op;
    op.file = m.file.get();
    op.offset = uint64_t{m.from.block} * kBlockSize;
    op.length = m.probe ? s.probe_record_bytes(m.tokens) : s.record_bytes(m.tokens);
    op.buf = m.buf.get();
    ops.push_back(op);
  }
  RETURN_IF_ERROR(s.ReadOnMain(ops).WithContext("store compact"));
  for (size_t i = 0; i < moves.size(); ++i) {
    Move& m = moves[i];
    m.status = ops[i].status;
    if (m.status.ok() && ops[i].done < ops[i].length) m.status = Status::Corruption("record cut short at end of segment");
    if (m.status.ok()) m.status = s.checker_.Verify(m.buf.get(), ExpectOf(s, m));
    if (!m.status.ok()) continue;
    const uint64_t len = ops[i].length;
    const bool unit_start = i == 0 || moves[i - 1].chunk != m.chunk || moves[i - 1].run != m.run;
    const uint64_t unit = m.run ? s.opts_.layers * len : s.ChunkRecordBytes(m.tokens);
    if (!s.writer_.open() || (unit_start && !m.probe && s.writer_.size() + unit > s.opts_.segment_bytes)) {
      RETURN_IF_ERROR(s.OpenSegment());
    }
    m.to = s.writer_.Next();
    *appended += len;
    RETURN_IF_ERROR(s.writer_.Append(std::string_view(m.buf.get(), len)));
  }
  return s.writer_.open() ? s.writer_.Sync() : Status::Ok();
}

// Reordered runs: a new Run with the moved locations replaces the old one
// (reads in flight keep the old one, whose segments stay open for them).
void SwitchRunsLocked(ChunkStore::Impl& s, std::vector<Move>& moves, CompactResult* out)
    TIERKV_REQUIRES(s.mu_) {
  std::map<const Run*, std::shared_ptr<Run>> moved;
  for (Move& m : moves) {
    if (!m.run) continue;
    if (s.runs_.Of(m.run->chunks[0]) != m.run) continue;  // dropped meanwhile
    if (!m.status.ok()) {
      TIERKV_LOG(kWarn) << "store compact: reordered record: " << m.status.ToString()
                        << "; the reordered layout is dropped";
      s.DropRunLocked(m.run->chunks[0]);
      moved.erase(m.run.get());
      continue;
    }
    auto& copy = moved[m.run.get()];
    if (!copy) copy = std::make_shared<Run>(*m.run);
    copy->where[m.run_index] = m.to;
    ++out->records_moved;
  }
  for (auto& [old_run, copy] : moved) s.runs_.Replace(old_run, copy);
}

// Chunks' K/V records: each layer's location switches to its copy; a
// record that failed drops its chunk.
void SwitchChunksLocked(ChunkStore::Impl& s, std::vector<Move>& moves, CompactResult* out)
    TIERKV_REQUIRES(s.mu_) {
  for (Move& m : moves) {
    if (m.run || m.probe) continue;
    const bool same = s.IsCurrentLocked(m.chunk, m.prefix_hash);
    if (!m.status.ok()) {
      TIERKV_LOG(kWarn) << "store compact: chunk " << m.chunk << " layer " << m.layer << ": "
                        << m.status.ToString() << "; the chunk and its descendants leave the index";
      if (same) s.DropLocked(m.chunk, m.status.IsCorruption());
      continue;
    }
    if (!same) continue;
    std::vector<Location> where = s.table_.LocationsOf(m.chunk);
    Location& at = where[m.layer];
    if (at.segment == m.from.segment && at.block == m.from.block) {
      at = m.to;
      s.table_.SetLocations(m.chunk, where);
      ++out->records_moved;
    }
  }
}

// Probe records, per chunk: all layers' copies, in the segment its K/V now
// lives in, or none (the probe keys are then sliced from K).
void SwitchProbesLocked(ChunkStore::Impl& s, std::vector<Move>& moves, CompactResult* out)
    TIERKV_REQUIRES(s.mu_) {
  const uint16_t L = s.opts_.layers;
  for (size_t i = 0; i < moves.size(); ++i) {
    if (!moves[i].probe || moves[i].layer != 0) continue;
    const Move& m0 = moves[i];
    if (!s.IsCurrentLocked(m0.chunk, m0.prefix_hash)) continue;
    if (s.table_.ProbeLocationOf(m0.chunk, 0).block != m0.from.block) continue;
    bool ok = i + L <= moves.size();
    for (uint16_t l = 0; l < L && ok; ++l) {
      const Move& m = moves[i + l];
      ok = m.probe && m.chunk == m0.chunk && m.status.ok() && m.to.segment != 0 &&
           m.to.segment == s.table_.LocationOf(m0.chunk, 0).segment;
    }
    if (ok) {
      s.table_.SetProbes(m0.chunk, m0.to.block,
                         static_cast<uint16_t>(s.probe_record_bytes(m0.tokens) / kBlockSize));
      out->records_moved += L;
    } else {
      // Not a wrong KV, only a lost copy: the K records still hold these keys.
      s.DropProbeCopyLocked(m0.chunk);
    }
  }
}

}  // namespace

std::unordered_map<uint32_t, uint64_t> ChunkStore::Impl::LiveBytesBySegmentLocked() const {
  return LiveBytes(*this, AllRuns(*this));
}

Result<CompactResult> ChunkStore::Impl::Compact(double min_dead_fraction) {
  if (opts_.read_only) return Status::InvalidArgument("store compact: opened read-only");
  if (!(min_dead_fraction > 0 && min_dead_fraction <= 1)) {
    return Status::InvalidArgument("store compact: min_dead_fraction must be in (0, 1]");
  }
  MutexLock w(&write_mu_);
  return CompactHeld(min_dead_fraction, SIZE_MAX);
}

void ChunkStore::Impl::ReclaimDead(uint64_t target) {
  // Each round removes at least one segment with dead bytes; the bound only
  // guards against accounts that disagree with the files.
  for (int round = 0; round < 256; ++round) {
    {
      MutexLock l(&mu_);
      if (dead_bytes_ <= target) return;
    }
    auto r = CompactHeld(1e-9, 1);
    if (!r.ok()) {
      TIERKV_LOG(kWarn) << "store " << opts_.dir << ": compacting dead bytes: " << r.status().ToString();
      return;
    }
    if (r->segments == 0) return;
  }
}

Result<CompactResult> ChunkStore::Impl::CompactHeld(double min_dead_fraction, size_t max_victims) {
  // It lists, writes and deletes segments by path.
  RETURN_IF_ERROR(CheckDirectoryHeld().WithContext("store compact"));
  RETURN_IF_ERROR(writer_.Seal().WithContext("store compact"));
  CompactResult out;
  ASSIGN_OR_RETURN(std::vector<uint32_t> segments, ListSegments(fs_, opts_.dir));
  // Sizes first: no file-system calls under the index lock. All segments are
  // sealed and Put waits on write_mu_, so they cannot grow meanwhile.
  std::vector<uint64_t> sizes;
  for (uint32_t seg : segments) {
    ASSIGN_OR_RETURN(uint64_t size, fs_->FileSize(SegmentPath(seg)));
    sizes.push_back(size);
  }
  CompactPlan plan;
  {
    MutexLock l(&mu_);
    RETURN_IF_ERROR(PlanLocked(*this, segments, sizes, min_dead_fraction, max_victims, &plan));
  }
  if (plan.victims.empty()) return out;
  uint64_t appended = 0;
  const WriteMark mark = Mark();
  if (Status s = CopyMoves(*this, plan.moves, &appended); !s.ok()) {
    // Nothing switched; the partial copies are cut off again.
    ReclaimFailedWrite(mark, appended);
    return s.WithContext("store compact");
  }
  // Switch the index to the copies, then make that durable, then delete.
  {
    MutexLock l(&mu_);
    SwitchRunsLocked(*this, plan.moves, &out);
    SwitchChunksLocked(*this, plan.moves, &out);
    SwitchProbesLocked(*this, plan.moves, &out);
    dirty_ = true;
  }
  RETURN_IF_ERROR(writer_.Seal().WithContext("store compact"));
  if (Status m = WriteManifest(); !m.ok()) {
    // Victims without a live record may go without it (no recovery needs
    // them); the manifest is what makes moved records' new places durable.
    if (!plan.moves.empty()) return m;
    TIERKV_LOG(kWarn) << "store " << opts_.dir << ": " << m.ToString()
                      << "; segments without live records deleted all the same";
  }
  {
    MutexLock l(&mu_);
    for (uint32_t seg : plan.victims) {
      if (seg < readers_.size()) readers_[seg].reset();  // reads in flight keep their own reference
    }
  }
  for (uint32_t seg : plan.victims) {
    known_headers_.EraseSegment(seg);
    RETURN_IF_ERROR(fs_->DeleteFile(SegmentPath(seg)));
  }
  RETURN_IF_ERROR(fs_->SyncDir(opts_.dir));
  out.segments = static_cast<uint32_t>(plan.victims.size());
  segment_count_ -= std::min<size_t>(segment_count_, plan.victims.size());
  {
    MutexLock l(&mu_);
    dead_bytes_ = dead_bytes_ + appended > plan.victim_bytes ? dead_bytes_ + appended - plan.victim_bytes : 0;
  }
  out.bytes_reclaimed = plan.victim_bytes > appended ? plan.victim_bytes - appended : 0;
  Count([&](StoreStats& st) {
    ++st.compactions;
    st.compacted_segments += out.segments;
    st.compacted_records += out.records_moved;
    st.reclaimed_bytes += out.bytes_reclaimed;
  });
  return out;
}

}  // namespace tierkv::store

// Selective reads of rows (ReadRows): for each record touched, the header
// block (unless the store knows it) and only the 4 KiB pages holding the
// selected rows, through a side backend; pages separated by gaps the cost
// model says are cheaper to read than to skip (io_model.h) are one read.
// Each needed page is verified. A chunk of a reordered run is read from the run's records; a
// reordered copy that fails is dropped and its rows are read again from the
// chunks' own records.
#include <cstring>
#include <algorithm>
#include <map>
#include <set>

#include "store/read_plan.h"
#include "store/store_impl.h"
#include "tierkv/logging.h"

namespace tierkv::store {
namespace {

// One distinct record touched; rows of several reads may share it.
struct Rec {
  Location where;
  std::shared_ptr<RandomAccessFile> file;
  Expect expect;
  std::shared_ptr<const Run> run;    // set for a reordered record
  uint32_t chunk = index::kNoChunk;  // set for a chunk's own record
  std::vector<bool> pages;           // payload pages needed
  std::shared_ptr<const KnownHeader> known;  // set: the header block is not read
  bool demand = false;
  AlignedBuffer buf;
  Status status;
};

// Where one requested row is: a record and the row within it.
struct Target {
  size_t rec;
  uint32_t row;
};

struct RowPlan {
  std::vector<Rec> recs;
  std::map<std::pair<uint32_t, uint32_t>, size_t> rec_at;  // (segment, block) -> recs index
  std::vector<std::vector<Target>> targets;                 // per read
};

// InvalidArgument or NotFound when the read cannot be served.
Status CheckRowRead(const ChunkStore::Impl& s, const RowRead& r) TIERKV_REQUIRES(s.mu_) {
  if (r.layer >= s.opts_.layers) {
    return Status::InvalidArgument("store row read: layer " + std::to_string(r.layer) + " of " +
                                   std::to_string(s.opts_.layers));
  }
  if (r.k == nullptr && r.v == nullptr) {
    return Status::InvalidArgument("store row read: neither K nor V requested");
  }
  if (!s.IsCurrentLocked(r.chunk, r.prefix_hash)) {
    return Status::NotFound("store row read: chunk " + std::to_string(r.chunk) + " not stored");
  }
  const uint32_t tokens = s.tree_.chunk(r.chunk).tokens;
  for (size_t j = 0; j < r.rows.size(); ++j) {
    if (r.rows[j] >= tokens || (j > 0 && r.rows[j] <= r.rows[j - 1])) {
      return Status::InvalidArgument("store row read: rows must ascend and be below the chunk's " +
                                     std::to_string(tokens) + " tokens (row " +
                                     std::to_string(r.rows[j]) + ")");
    }
  }
  return Status::Ok();
}

// A new record entry for `where`: a run's record `run_record`, or the chunk's own.
Result<Rec> NewRec(ChunkStore::Impl& s, const RowRead& r, const std::shared_ptr<const Run>& run,
                   Location where, uint32_t run_record, uint32_t rec_tokens) TIERKV_REQUIRES(s.mu_) {
  const index::ChunkInfo& c = s.tree_.chunk(r.chunk);
  Rec rec;
  rec.where = where;
  ASSIGN_OR_RETURN(rec.file, s.ReaderForLocked(where.segment));
  if (run) {
    rec.expect = RunRecordExpect(*run, r.layer, run_record);
    rec.run = run;
  } else {
    rec.expect = KeyValueExpect(r.layer, c.prefix_hash, c.first_token, rec_tokens);
    rec.chunk = r.chunk;
  }
  rec.known = s.known_headers_.Find(where, rec.expect);
  rec.pages.assign(PagesFor(PayloadBytesFor(RecordKind::kKeyValue, rec_tokens, s.opts_.row_bytes)), false);
  return rec;
}

// Per reordered run the reads touch: whether reading their rows from the
// run is predicted faster than from the chunks' own records. Each side's
// blocks (pages holding a wanted row, K and/or V, shared pages once, plus
// each record's header unless the store knows it) are costed as PageRuns
// reads them, gaps merged, by the cost model. Rows the run packs together
// are cheaper there; runs of consecutive tokens (page or block units) are
// cheaper in the chunks' own records.
struct RunCost {
  std::set<uint64_t> run_blocks;  // (run record << 32) | block
  std::set<uint32_t> run_records;
  double own_seconds = 0;
};

void AddRunCost(const ChunkStore::Impl& s, const RowRead& r, const Run& run, RunCost* cost)
    TIERKV_REQUIRES(s.mu_) {
  const uint32_t C = s.opts_.chunk_tokens;
  const uint64_t rb = s.opts_.row_bytes;
  const index::ChunkInfo& c = s.tree_.chunk(r.chunk);
  const bool k = r.k != nullptr, v = r.v != nullptr;
  std::set<uint64_t> own;
  for (uint32_t row : r.rows) {
    AddRowBlocks(0, row, c.tokens, rb, k, v, &own);
    const uint32_t slot = run.map.SlotOf(r.layer, c.first_token + row - run.first_token);
    AddRowBlocks(slot / C, slot % C, run.RecordTokens(slot / C), rb, k, v, &cost->run_blocks);
    cost->run_records.insert(slot / C);
  }
  const Expect e = KeyValueExpect(r.layer, c.prefix_hash, c.first_token, c.tokens);
  if (!s.known_headers_.Find(s.table_.LocationOf(r.chunk, r.layer), e)) own.insert(0);
  cost->own_seconds += PredictedSeconds(own, s.MergeGap(), s.io_model_);
}

bool RunIsCheaper(const ChunkStore::Impl& s, const Run& run, uint16_t layer, const RunCost& cost)
    TIERKV_REQUIRES(s.mu_) {
  std::set<uint64_t> blocks = cost.run_blocks;
  for (uint32_t rec : cost.run_records) {
    const Expect re = RunRecordExpect(run, layer, rec);
    if (!s.known_headers_.Find(run.where[size_t{layer} * run.records + rec], re)) {
      blocks.insert(uint64_t{rec} << 32);
    }
  }
  return PredictedSeconds(blocks, s.MergeGap(), s.io_model_) < cost.own_seconds;
}

// The runs (by layer) worth reading from for these reads.
std::set<std::pair<const Run*, uint16_t>> CheaperRuns(const ChunkStore::Impl& s, std::span<const RowRead> reads)
    TIERKV_REQUIRES(s.mu_) {
  std::map<std::pair<const Run*, uint16_t>, RunCost> costs;
  for (const RowRead& r : reads) {
    if (!r.status.ok()) continue;
    const std::shared_ptr<const Run>& run = s.runs_.Of(r.chunk);
    if (!run) continue;
    AddRunCost(s, r, *run, &costs[{run.get(), r.layer}]);
  }
  std::set<std::pair<const Run*, uint16_t>> cheaper;
  for (const auto& [key, cost] : costs) {
    if (RunIsCheaper(s, *key.first, key.second, cost)) cheaper.insert(key);
  }
  return cheaper;
}

// The records and pages read `i` needs.
Status PlanRows(ChunkStore::Impl& s, RowRead& r, size_t i, const std::set<std::pair<const Run*, uint16_t>>& use_runs,
                RowPlan* plan) TIERKV_REQUIRES(s.mu_) {
  const uint32_t C = s.opts_.chunk_tokens;
  const uint64_t rb = s.opts_.row_bytes;
  const index::ChunkInfo& c = s.tree_.chunk(r.chunk);
  std::shared_ptr<const Run> run = s.runs_.Of(r.chunk);
  if (run && !use_runs.count({run.get(), r.layer})) run = nullptr;
  s.table_.Touch(r.chunk);
  plan->targets[i].reserve(r.rows.size());
  for (uint32_t row : r.rows) {
    Location where;
    uint32_t rec_row = row, rec_tokens = c.tokens, run_record = 0;
    if (run) {
      const uint32_t slot = run->map.SlotOf(r.layer, c.first_token + row - run->first_token);
      run_record = slot / C;
      rec_row = slot % C;
      rec_tokens = run->RecordTokens(run_record);
      where = run->where[size_t{r.layer} * run->records + run_record];
    } else {
      where = s.table_.LocationOf(r.chunk, r.layer);
    }
    auto [it, fresh] = plan->rec_at.try_emplace({where.segment, where.block}, plan->recs.size());
    if (fresh) {
      auto rec = NewRec(s, r, run, where, run_record, rec_tokens);
      if (!rec.ok()) {
        plan->rec_at.erase(it);
        return rec.status();
      }
      plan->recs.push_back(std::move(rec).value());
    }
    Rec& rec = plan->recs[it->second];
    auto mark = [&](uint64_t from) {
      for (uint64_t pg = from / kBlockSize; pg <= (from + rb - 1) / kBlockSize; ++pg) rec.pages[pg] = true;
    };
    if (r.k) mark(rec_row * rb);
    if (r.v) mark((uint64_t{rec.expect.tokens} + rec_row) * rb);
    rec.demand = rec.demand || !r.prefetch;
    plan->targets[i].push_back(Target{it->second, rec_row});
  }
  return Status::Ok();
}

// The header block (unless known) and the needed pages of each record, as
// reads: needed blocks separated by at most `merge_gap` unneeded ones are
// one read (the cost model says reading the gap is cheaper than another
// read; 0 merges only adjacent blocks). *pages: payload pages read.
std::vector<ReadOp> PageRuns(std::vector<Rec>& recs, uint32_t merge_gap, std::vector<size_t>* op_rec,
                             uint64_t* pages) {
  std::vector<ReadOp> ops;
  for (size_t ri = 0; ri < recs.size(); ++ri) {
    Rec& rec = recs[ri];
    rec.buf = AllocateAligned((1 + rec.pages.size()) * kBlockSize);
    const auto reads = RecordReads(rec.pages, rec.known != nullptr, merge_gap);
    *pages += PayloadPagesOf(reads);
    for (const auto& [b, e] : reads) {
      ReadOp op;
      op.file = rec.file.get();
      op.offset = (uint64_t{rec.where.block} + b) * kBlockSize;
      op.length = (e - b) * kBlockSize;
      op.buf = rec.buf.get() + b * kBlockSize;
      op.prefetch = !rec.demand;
      ops.push_back(op);
      op_rec->push_back(ri);
    }
  }
  return ops;
}

// A record that failed: a reordered copy's layout is dropped (the reads fall
// back to the originals), a chunk's own corrupt record drops the chunk.
void OnBadRecord(ChunkStore::Impl& s, Rec& rec) TIERKV_EXCLUDES(s.mu_) {
  rec.status = rec.status.WithContext(std::string(rec.run ? "reordered record" : "record") +
                                      " layer " + std::to_string(rec.expect.layer) + " at " +
                                      s.SegmentPath(rec.where.segment) + " block " +
                                      std::to_string(rec.where.block));
  MutexLock l(&s.mu_);
  if (rec.run) {
    TIERKV_LOG(kWarn) << "store: " << rec.status.ToString() << "; the reordered layout is dropped";
    if (s.runs_.Of(rec.run->chunks[0]) == rec.run) s.DropRunLocked(rec.run->chunks[0]);
  } else if (rec.status.IsCorruption()) {
    TIERKV_LOG(kWarn) << "store: chunk " << rec.chunk << ": " << rec.status.ToString()
                      << "; the chunk and its descendants leave the index";
    s.DropCorruptLocked(rec.chunk, rec.expect.prefix_hash);
  }
}

// Copies each read's rows out, or marks it for a retry (a reordered copy
// failed) or failed (its chunk's own record did).
void DeliverRows(std::span<RowRead> reads, const RowPlan& plan, uint64_t rb, std::vector<size_t>* retry) {
  for (size_t i = 0; i < reads.size(); ++i) {
    RowRead& r = reads[i];
    if (!r.status.ok()) continue;
    bool from_bad_run = false;
    for (const Target& t : plan.targets[i]) {
      const Rec& rec = plan.recs[t.rec];
      if (rec.status.ok()) continue;
      from_bad_run = from_bad_run || rec.run != nullptr;
      if (!rec.run) r.status = rec.status;
    }
    if (!r.status.ok()) continue;
    if (from_bad_run) {
      retry->push_back(i);
      continue;
    }
    for (size_t j = 0; j < plan.targets[i].size(); ++j) {
      const Target& t = plan.targets[i][j];
      const Rec& rec = plan.recs[t.rec];
      const char* payload = rec.buf.get() + kBlockSize;
      if (r.k) std::memcpy(r.k + j * rb, payload + t.row * rb, rb);
      if (r.v) std::memcpy(r.v + j * rb, payload + (uint64_t{rec.expect.tokens} + t.row) * rb, rb);
    }
  }
}

}  // namespace

Status ChunkStore::Impl::ReadRows(std::span<RowRead> reads, RowReadStats* out_stats) {
  RowPlan plan;
  plan.targets.resize(reads.size());
  {
    MutexLock l(&mu_);
    for (RowRead& r : reads) r.status = CheckRowRead(*this, r);
    const auto use_runs = CheaperRuns(*this, reads);
    for (size_t i = 0; i < reads.size(); ++i) {
      RowRead& r = reads[i];
      if (r.status.ok()) r.status = PlanRows(*this, r, i, use_runs, &plan);
      if (!r.status.ok()) plan.targets[i].clear();
    }
  }
  RowReadStats st;
  std::vector<size_t> op_rec;
  std::vector<ReadOp> ops = PageRuns(plan.recs, MergeGap(), &op_rec, &st.pages);
  RETURN_IF_ERROR(ReadOnSide(ops));
  for (size_t oi = 0; oi < ops.size(); ++oi) {
    Rec& rec = plan.recs[op_rec[oi]];
    st.bytes += ops[oi].done;
    if (!rec.status.ok()) continue;
    rec.status = ops[oi].status;
    if (rec.status.ok() && ops[oi].done < ops[oi].length) {
      rec.status = Status::Corruption("record cut short at end of segment");
    }
  }
  uint64_t corrupt = 0, errors = 0;
  for (Rec& rec : plan.recs) {
    if (rec.run) ++st.reordered_records;
    if (rec.status.ok() && rec.known) {
      rec.status = CheckPages(rec.buf.get(), rec.known->page_checksums, rec.pages);
    } else if (rec.status.ok()) {
      auto h = checker_.VerifyPages(rec.buf.get(), rec.expect, rec.pages);
      rec.status = h.status();
      if (h.ok()) known_headers_.Put(rec.where, KnownHeader::Of(*h));  // the next read skips it
    }
    if (rec.status.ok()) continue;
    rec.status.IsCorruption() ? ++corrupt : ++errors;
    OnBadRecord(*this, rec);
  }
  std::vector<size_t> retry;
  DeliverRows(reads, plan, opts_.row_bytes, &retry);
  st.records = plan.recs.size();
  st.ios = ops.size();
  CountRead(st, corrupt, errors);
  Count([&](StoreStats& s) { s.row_reads += reads.size(); });
  if (!retry.empty()) {
    // The layout is gone now, so these read the chunks' own records.
    std::vector<RowRead> again;
    for (size_t i : retry) again.push_back(reads[i]);
    RowReadStats more;
    RETURN_IF_ERROR(ReadRows(again, &more));
    for (size_t n = 0; n < retry.size(); ++n) reads[retry[n]].status = again[n].status;
    st.Add(more);
  }
  if (out_stats) *out_stats = st;
  return Status::Ok();
}

}  // namespace tierkv::store

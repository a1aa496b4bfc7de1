// KV reordering (IMPRESS 4.4.1): requests report per-row importance of the
// chunks they used; a round rewrites each run of a node's chunks with new
// reports per layer in descending average importance (extra records with a
// mapping list), and swaps the layout in under the index lock. The chunks'
// own records stay the source of truth; a layout is dropped with any of its
// chunks.
#include <algorithm>
#include <cstring>
#include <set>

#include "store/store_impl.h"
#include "tierkv/logging.h"

namespace tierkv::store {

void ChunkStore::Impl::ReportImportance(const LookupResult& prefix, uint16_t layer,
                                        std::span<const float> importance) {
  if (layer >= opts_.layers) return;
  const uint32_t C = opts_.chunk_tokens;
  MutexLock l(&mu_);
  size_t pos = 0;
  for (size_t i = 0; i < prefix.chunks.size() && pos < importance.size(); ++i) {
    const uint32_t id = prefix.chunks[i];
    const size_t n = prefix.chunk_tokens[i];
    const size_t used = std::min(n, importance.size() - pos);
    if (IsCurrentLocked(id, prefix.prefix_hashes[i])) {
      Heat& h = heat_[id];
      if (h.prefix_hash != prefix.prefix_hashes[i] || h.sum.empty()) {
        h = Heat{};
        h.prefix_hash = prefix.prefix_hashes[i];
        h.sum.assign(size_t{opts_.layers} * C, 0.0f);
        h.reports.assign(opts_.layers, 0);
      }
      for (size_t r = 0; r < used; ++r) h.sum[size_t{layer} * C + r] += importance[pos + r];
      ++h.reports[layer];
      h.last = ++heat_clock_;
      h.fresh = true;
    }
    pos += n;
  }
  const size_t limit = std::max<uint32_t>(1, opts_.reorder_tracked_chunks);
  if (heat_.size() > limit + limit / 8) {
    // Forget the least recently reported, down to the limit (amortised).
    std::vector<std::pair<uint64_t, uint32_t>> by_age;
    for (const auto& [id, h] : heat_) by_age.emplace_back(h.last, id);
    std::nth_element(by_age.begin(), by_age.begin() + (heat_.size() - limit), by_age.end());
    for (size_t k = 0; k < heat_.size() - limit; ++k) heat_.erase(by_age[k].second);
  }
}

void ChunkStore::Impl::DropRunLocked(uint32_t chunk) {
  const std::shared_ptr<const Run> run = runs_.Remove(chunk);
  if (!run) return;
  for (const Location& at : run->where) known_headers_.Erase(at);
  live_bytes_ -= run->bytes;
  dead_bytes_ += run->bytes;
  Count([](StoreStats& s) { ++s.reordered_runs_dropped; });
}

void ChunkStore::Impl::ForgetChunkLocked(uint32_t chunk, uint64_t prefix_hash) {
  DropRunLocked(chunk);
  heat_.erase(chunk);
  if (opts_.on_chunk_removed) opts_.on_chunk_removed(prefix_hash);
}

namespace {

// A run to rewrite: its new layout and where its chunks' records are.
struct RunPlan {
  std::shared_ptr<Run> run;
  std::vector<uint16_t> tokens;                          // per chunk
  std::vector<std::vector<Location>> sources;            // per chunk, per layer
  std::vector<std::shared_ptr<RandomAccessFile>> files;  // per chunk, per layer
  double heat = 0;                                       // layer 0's reports: hottest first
};

// The run of node chunks [start, end): its chunks, identity and tokens.
RunPlan NewRun(const ChunkStore::Impl& s, std::span<const uint32_t> node, size_t start, size_t end)
    TIERKV_REQUIRES(s.mu_) {
  RunPlan p;
  p.run = std::make_shared<Run>();
  Run& run = *p.run;
  run.chunk_tokens = s.opts_.chunk_tokens;
  run.first_token = s.tree_.chunk(node[start]).first_token;
  for (size_t k = start; k < end; ++k) {
    const index::ChunkInfo& c = s.tree_.chunk(node[k]);
    run.chunks.push_back(node[k]);
    run.hashes.push_back(c.prefix_hash);
    p.tokens.push_back(static_cast<uint16_t>(c.tokens));
    run.rows += c.tokens;
  }
  run.end_hash = run.hashes.back();
  const uint32_t parent = s.tree_.ParentChunk(node[start]);
  run.parent_hash = parent == index::kNoChunk ? s.tree_.NamespaceOf(node[start]) : s.tree_.chunk(parent).prefix_hash;
  return p;
}

// The run's mapping list: per layer, rows by average reported importance
// (rows never reported score 0).
Status OrderRun(const ChunkStore::Impl& s, RunPlan* p) TIERKV_REQUIRES(s.mu_) {
  const uint32_t C = s.opts_.chunk_tokens;
  Run& run = *p->run;
  std::vector<std::vector<uint32_t>> orders(s.opts_.layers);
  for (uint16_t layer = 0; layer < s.opts_.layers; ++layer) {
    std::vector<float> score(run.rows, 0.0f);
    uint32_t row = 0;
    for (size_t k = 0; k < run.chunks.size(); ++k) {
      auto ht = s.heat_.find(run.chunks[k]);
      const bool ok = ht != s.heat_.end() && ht->second.prefix_hash == run.hashes[k] &&
                      ht->second.reports[layer] > 0;
      for (uint32_t r = 0; r < p->tokens[k]; ++r, ++row) {
        if (ok) score[row] = ht->second.sum[size_t{layer} * C + r] / ht->second.reports[layer];
      }
      if (ok && layer == 0) p->heat += ht->second.reports[0];
    }
    orders[layer] = index::MappingList::OrderByScore(score);
  }
  auto map = index::MappingList::FromOrders(orders);
  if (!map.ok()) return map.status().WithContext("store reorder");
  run.map = std::move(map).value();
  return Status::Ok();
}

// Whether rewriting gains nothing: the same layout is installed, or the
// order is the identity and none is.
bool NothingToGain(const ChunkStore::Impl& s, const Run& run) TIERKV_REQUIRES(s.mu_) {
  bool identity = true;
  for (uint16_t layer = 0; layer < s.opts_.layers && identity; ++layer) identity = run.map.IsIdentity(layer);
  const std::shared_ptr<const Run>& old = s.runs_.Of(run.chunks[0]);
  const bool same_as_old = old && old->chunks == run.chunks && old->map == run.map;
  return same_as_old || (identity && !old);
}

void MarkReordered(ChunkStore::Impl& s, const Run& run) TIERKV_REQUIRES(s.mu_) {
  for (uint32_t c : run.chunks) {
    auto ht = s.heat_.find(c);
    if (ht != s.heat_.end()) ht->second.fresh = false;
  }
}

// The plan for the run holding chunk `id` (max_chunks chunks of its node),
// or none; Status on a failure that ends the round.
Result<bool> PlanRun(ChunkStore::Impl& s, uint32_t id, uint32_t max_chunks, std::set<uint32_t>* seen,
                     RunPlan* p) TIERKV_REQUIRES(s.mu_) {
  const std::span<const uint32_t> node = s.tree_.NodeChunksOf(id);
  const size_t start = s.tree_.chunk(id).index_in_node / max_chunks * max_chunks;
  const size_t end = std::min(node.size(), start + max_chunks);
  if (!seen->insert(node[start]).second) return false;
  *p = NewRun(s, node, start, end);
  RETURN_IF_ERROR(OrderRun(s, p));
  Run& run = *p->run;
  if (NothingToGain(s, run)) {
    MarkReordered(s, run);
    return false;
  }
  run.records = (run.rows + run.chunk_tokens - 1) / run.chunk_tokens;
  for (uint32_t i = 0; i < run.records; ++i) run.bytes += s.opts_.layers * s.record_bytes(run.RecordTokens(i));
  if (s.opts_.disk_budget_bytes != 0 && s.live_bytes_ + run.bytes > s.opts_.disk_budget_bytes) {
    return false;  // a layout never evicts chunks to make room for itself
  }
  for (uint32_t c : run.chunks) {
    p->sources.push_back(s.table_.LocationsOf(c));
    for (const Location& at : p->sources.back()) {
      auto file = s.ReaderForLocked(at.segment);
      if (!file.ok()) return file.status().WithContext("store reorder");
      p->files.push_back(std::move(file).value());
    }
  }
  return true;
}

// The run's chunks' own records (all layers), read; *bad: a record that
// fails verification (the run is then not reordered).
Status ReadSources(ChunkStore::Impl& s, const RunPlan& p, std::vector<AlignedBuffer>* bufs, Status* bad) {
  const Run& run = *p.run;
  const uint16_t L = s.opts_.layers;
  std::vector<ReadOp> ops;
  for (size_t k = 0; k < run.chunks.size(); ++k) {
    for (uint16_t layer = 0; layer < L; ++layer) {
      const uint64_t len = s.record_bytes(p.tokens[k]);
      bufs->push_back(AllocateAligned(len));
      ReadOp op;
      op.file = p.files[k * L + layer].get();
      op.offset = uint64_t{p.sources[k][layer].block} * kBlockSize;
      op.length = len;
      op.buf = bufs->back().get();
      op.prefetch = true;  // background work: demand reads of requests go first
      ops.push_back(op);
    }
  }
  RETURN_IF_ERROR(s.ReadOnMain(ops).WithContext("store reorder"));
  uint32_t first = run.first_token;
  for (size_t k = 0; k < run.chunks.size() && bad->ok(); ++k) {
    for (uint16_t layer = 0; layer < L && bad->ok(); ++layer) {
      const ReadOp& op = ops[k * L + layer];
      *bad = op.status;
      if (bad->ok() && op.done < op.length) *bad = Status::Corruption("record cut short");
      if (bad->ok()) *bad = s.checker_.Verify(op.buf, KeyValueExpect(layer, run.hashes[k], first, p.tokens[k]));
    }
    first += p.tokens[k];
  }
  return Status::Ok();
}

}  // namespace

std::string ChunkStore::Impl::EncodeRunRecords(const Run& run, std::span<const uint16_t> tokens,
                                               const RunRows& rows_of, std::vector<KnownHeader>* headers) {
  const uint32_t C = opts_.chunk_tokens;
  const uint64_t rb = opts_.row_bytes;
  const uint16_t L = opts_.layers;
  // Row r of the run lives in chunk k at row r - (k's first row).
  std::vector<uint32_t> chunk_of(run.rows), row_in(run.rows);
  for (uint32_t k = 0, r = 0; k < tokens.size(); ++k) {
    for (uint32_t i = 0; i < tokens[k]; ++i, ++r) {
      chunk_of[r] = k;
      row_in[r] = i;
    }
  }
  std::string payload, record, all;
  for (uint16_t layer = 0; layer < L; ++layer) {
    const std::vector<uint32_t> rows = run.map.RowsOf(layer);
    std::vector<std::pair<const char*, const char*>> src(tokens.size());
    for (size_t k = 0; k < tokens.size(); ++k) src[k] = rows_of(k, layer);
    for (uint32_t i = 0; i < run.records; ++i) {
      const uint32_t n = run.RecordTokens(i);
      payload.assign(2 * n * rb, '\0');
      RecordHeader h;
      h.fingerprint = opts_.fingerprint;
      h.kind = RecordKind::kReorderedKeyValue;
      h.dtype = opts_.dtype;
      h.layer = layer;
      h.first_token = run.first_token;
      h.token_count = n;
      h.row_bytes = opts_.row_bytes;
      h.prefix_hash = run.end_hash;
      h.parent_hash = run.parent_hash;
      for (uint32_t j = 0; j < n; ++j) {
        const uint32_t row = rows[i * C + j];
        const auto [k, v] = src[chunk_of[row]];
        std::memcpy(payload.data() + j * rb, k + row_in[row] * rb, rb);
        std::memcpy(payload.data() + (n + j) * rb, v + row_in[row] * rb, rb);
        h.tokens.push_back(static_cast<int32_t>(run.first_token + row));
      }
      h.sequence = ++sequence_;
      EncodeRecord(h, payload, &record);
      all += record;
      headers->push_back(KnownHeader::Of(h));
    }
  }
  return all;
}

Status ChunkStore::Impl::AppendRun(Run& run, const std::string& all) {
  const Location base = writer_.Next();
  RETURN_IF_ERROR(writer_.Append(all));
  uint32_t block = base.block;
  run.where.clear();
  for (uint16_t layer = 0; layer < opts_.layers; ++layer) {
    for (uint32_t i = 0; i < run.records; ++i) {
      run.where.push_back(Location{base.segment, block});
      block += static_cast<uint32_t>(record_bytes(run.RecordTokens(i)) / kBlockSize);
    }
  }
  return Status::Ok();
}

bool ChunkStore::Impl::InstallRunLocked(const std::shared_ptr<Run>& run, uint64_t written,
                                        std::vector<KnownHeader> headers) {
  bool still = true;
  for (size_t k = 0; k < run->chunks.size() && still; ++k) still = IsCurrentLocked(run->chunks[k], run->hashes[k]);
  const bool fits = opts_.disk_budget_bytes == 0 || live_bytes_ + run->bytes <= opts_.disk_budget_bytes;
  if (!still || !fits) {
    dead_bytes_ += written;
    return false;
  }
  for (uint32_t c : run->chunks) DropRunLocked(c);
  runs_.Install(run);
  MarkReordered(*this, *run);
  for (size_t i = 0; i < headers.size() && i < run->where.size(); ++i) {
    known_headers_.Put(run->where[i], std::move(headers[i]));
  }
  live_bytes_ += run->bytes;
  return true;
}

Result<ReorderResult> ChunkStore::Impl::Reorder(const ReorderOptions& ro) {
  if (opts_.read_only) return Status::InvalidArgument("store reorder: opened read-only");
  const uint32_t C = opts_.chunk_tokens;
  const uint32_t max_chunks =
      std::max<uint32_t>(1, std::min<uint32_t>(ro.max_run_chunks, index::MappingList::kMaxRows / C));
  MutexLock w(&write_mu_);
  RETURN_IF_ERROR(CheckDirectoryHeld().WithContext("store reorder"));
  std::vector<RunPlan> plans;
  {
    MutexLock l(&mu_);
    std::set<uint32_t> seen;  // runs by first chunk
    for (auto& [id, h] : heat_) {
      if (!h.fresh || !IsCurrentLocked(id, h.prefix_hash)) continue;
      RunPlan p;
      ASSIGN_OR_RETURN(bool planned, PlanRun(*this, id, max_chunks, &seen, &p));
      if (planned) plans.push_back(std::move(p));
    }
    std::sort(plans.begin(), plans.end(), [](const RunPlan& a, const RunPlan& b) { return a.heat > b.heat; });
    if (plans.size() > ro.max_runs) plans.resize(ro.max_runs);
  }
  ReorderResult out;
  for (RunPlan& p : plans) {
    std::vector<AlignedBuffer> bufs;
    Status bad;
    RETURN_IF_ERROR(ReadSources(*this, p, &bufs, &bad));
    if (!bad.ok()) {
      // Left for the reads to find and handle; this run is simply not reordered.
      TIERKV_LOG(kWarn) << "store reorder: skipping a run: " << bad.ToString();
      continue;
    }
    const uint16_t L = opts_.layers;
    std::vector<KnownHeader> headers;
    const std::string all = EncodeRunRecords(
        *p.run, p.tokens,
        [&](size_t k, uint16_t layer) {
          const char* payload = bufs[k * L + layer].get() + kBlockSize;
          return std::pair<const char*, const char*>(payload, payload + uint64_t{p.tokens[k]} * opts_.row_bytes);
        },
        &headers);
    const WriteMark mark = Mark();
    Status s = Status::Ok();
    if (!writer_.open() || writer_.size() + all.size() > opts_.segment_bytes) s = OpenSegment();
    if (s.ok()) s = AppendRun(*p.run, all);
    if (s.ok()) s = writer_.Sync();
    if (!s.ok()) {
      ReclaimFailedWrite(mark, all.size());
      return s.WithContext("store reorder");
    }
    out.bytes_written += all.size();
    MutexLock l(&mu_);
    InstallRunLocked(p.run, all.size(), std::move(headers)) ? ++out.runs : ++out.discarded;
  }
  Count([&](StoreStats& st) {
    st.reorders += out.runs;
    st.bytes_written += out.bytes_written;
  });
  return out;
}

}  // namespace tierkv::store

// Verify: every record of every live chunk read and checked, without
// dropping anything first (so that every damaged record is reported); with
// repair, the damaged chunks leave the index and a manifest makes it durable.
#include <algorithm>
#include <tuple>

#include "store/cache_dir.h"
#include "store/store_impl.h"
#include "tierkv/logging.h"

namespace tierkv::store {
namespace {

// Records checked per batch (bounds the memory a verification holds).
constexpr size_t kVerifyBatch = 64;

struct ToCheck {
  uint32_t chunk;
  uint64_t prefix_hash;
  Location at;
  uint64_t len;
  Expect expect;
  bool probe;
  std::shared_ptr<RandomAccessFile> file;
};

// Every record of every live chunk, with what it must be.
std::vector<ToCheck> ListRecords(ChunkStore::Impl& s) TIERKV_REQUIRES(s.mu_) {
  std::vector<ToCheck> out;
  for (uint32_t id : s.tree_.LiveChunks()) {
    const index::ChunkInfo& c = s.tree_.chunk(id);
    for (uint16_t l = 0; l < s.opts_.layers; ++l) {
      const Location at = s.table_.LocationOf(id, l);
      auto file = s.ReaderForLocked(at.segment);
      out.push_back(ToCheck{id, c.prefix_hash, at, s.record_bytes(c.tokens),
                            KeyValueExpect(l, c.prefix_hash, c.first_token, c.tokens), false,
                            file.ok() ? *file : nullptr});
      if (!s.table_.HasProbes(id)) continue;
      Expect e = KeyValueExpect(l, c.prefix_hash, c.first_token, c.tokens);
      e.kind = RecordKind::kProbeKeys;
      e.row_bytes = s.opts_.probe_bytes;
      const Location pat = s.table_.ProbeLocationOf(id, l);
      auto pfile = s.ReaderForLocked(pat.segment);
      out.push_back(ToCheck{id, c.prefix_hash, pat, s.probe_record_bytes(c.tokens), e, true,
                            pfile.ok() ? *pfile : nullptr});
    }
  }
  std::sort(out.begin(), out.end(), [](const ToCheck& a, const ToCheck& b) {
    return std::tie(a.at.segment, a.at.block) < std::tie(b.at.segment, b.at.block);
  });
  return out;
}

// Reads and checks records [from, to); appends the damaged ones to the
// report and their indices in `recs` to *bad.
Status CheckBatch(ChunkStore::Impl& s, const std::vector<ToCheck>& recs, size_t from, size_t to,
                  VerifyReport* report, std::vector<size_t>* bad) {
  std::vector<AlignedBuffer> bufs;
  std::vector<ReadOp> ops;
  for (size_t i = from; i < to; ++i) {
    bufs.push_back(AllocateAligned(recs[i].len));
    ReadOp op;
    op.file = recs[i].file.get();
    op.offset = uint64_t{recs[i].at.block} * kBlockSize;
    op.length = recs[i].file ? recs[i].len : 0;
    op.buf = bufs.back().get();
    op.prefetch = true;  // background work
    ops.push_back(op);
  }
  RETURN_IF_ERROR(s.ReadOnSide(ops));
  for (size_t i = from; i < to; ++i) {
    const ReadOp& op = ops[i - from];
    const ToCheck& r = recs[i];
    Status st = r.file ? op.status : Status::IOError("segment not open");
    if (st.ok() && op.done < r.len) st = Status::Corruption("record cut short at end of segment");
    if (st.ok()) st = s.checker_.Verify(op.buf, r.expect);
    ++report->records;
    report->bytes += op.done;
    if (st.ok()) continue;
    bad->push_back(i);
    report->damaged.push_back(DamagedRecord{SegmentFileName(r.at.segment),
                                            uint64_t{r.at.block} * kBlockSize, r.probe ? "probe" : "kv",
                                            r.chunk, r.expect.layer, st.ToString()});
  }
  return Status::Ok();
}

}  // namespace

Result<VerifyReport> ChunkStore::Impl::Verify(bool repair) {
  if (repair && opts_.read_only) return Status::InvalidArgument("store repair: opened read-only");
  std::vector<ToCheck> recs;
  {
    MutexLock l(&mu_);
    recs = ListRecords(*this);
  }
  VerifyReport report;
  std::vector<size_t> bad;  // indices in recs
  for (size_t i = 0; i < recs.size(); i += kVerifyBatch) {
    RETURN_IF_ERROR(CheckBatch(*this, recs, i, std::min(recs.size(), i + kVerifyBatch), &report, &bad));
  }
  Count([&](StoreStats& s) { s.corrupt_records += report.damaged.size(); });
  if (!repair || bad.empty()) return report;
  {
    MutexLock l(&mu_);
    const uint64_t before = tree_.num_chunks();
    for (size_t i : bad) {
      // Nothing to drop if the chunk left meanwhile (with an earlier damaged one).
      if (!IsCurrentLocked(recs[i].chunk, recs[i].prefix_hash)) continue;
      if (recs[i].probe) {
        DropProbeCopyLocked(recs[i].chunk);
      } else {
        DropLocked(recs[i].chunk, /*corrupt=*/true);
      }
    }
    report.dropped_chunks = before - tree_.num_chunks();
  }
  RETURN_IF_ERROR(Checkpoint());
  report.repaired = true;
  TIERKV_LOG(kInfo) << "store " << opts_.dir << ": repair dropped " << report.dropped_chunks
                    << " chunks with damaged records";
  return report;
}

}  // namespace tierkv::store

// Probe-key reads (ReadProbeKeys): each chunk's probe record of the layer;
// records that sit back to back (one layer of consecutive chunks of one Put)
// are fetched with one read, through a side backend. A chunk without a probe
// copy, or whose copy fails, gets its probe keys sliced from its K record
// (the first probe_bytes of each row), verified as any record.
#include <algorithm>
#include <cstring>
#include <tuple>

#include "store/store_impl.h"
#include "tierkv/logging.h"

namespace tierkv::store {
namespace {

struct Probe {
  size_t read;  // index in reads
  Location where;
  uint64_t len;
  Expect expect;
  std::shared_ptr<RandomAccessFile> file;
  char* buf = nullptr;
  Status status;
};

struct ProbePlan {
  std::vector<Probe> probes;
  std::vector<size_t> fallback;  // reads served from K records
};

void PlanProbe(ChunkStore::Impl& s, std::span<ProbeRead> reads, size_t i, ProbePlan* plan)
    TIERKV_REQUIRES(s.mu_) {
  ProbeRead& r = reads[i];
  r.status = Status::Ok();
  r.from_probe_record = false;
  if (r.layer >= s.opts_.layers || r.out == nullptr) {
    r.status = Status::InvalidArgument("store probe read: layer " + std::to_string(r.layer) + " of " +
                                       std::to_string(s.opts_.layers) + (r.out ? "" : ", no output buffer"));
    return;
  }
  if (!s.IsCurrentLocked(r.chunk, r.prefix_hash)) {
    r.status = Status::NotFound("store probe read: chunk " + std::to_string(r.chunk) + " not stored");
    return;
  }
  const Location at = s.table_.ProbeLocationOf(r.chunk, r.layer);
  if (at.segment == 0) {
    plan->fallback.push_back(i);
    return;
  }
  auto file = s.ReaderForLocked(at.segment);
  if (!file.ok()) {
    r.status = file.status();
    return;
  }
  const index::ChunkInfo& c = s.tree_.chunk(r.chunk);
  Probe p{i, at, s.probe_record_bytes(c.tokens), Expect{}, *file};
  p.expect.kind = RecordKind::kProbeKeys;
  p.expect.layer = r.layer;
  p.expect.prefix_hash = c.prefix_hash;
  p.expect.first_token = c.first_token;
  p.expect.tokens = c.tokens;
  p.expect.row_bytes = s.opts_.probe_bytes;
  s.table_.Touch(r.chunk);
  plan->probes.push_back(std::move(p));
}

// One read per run of back-to-back probe records. op_probes: [first, last)
// of the probes each op covers.
std::vector<ReadOp> MergeProbes(std::vector<Probe>& probes, std::span<const ProbeRead> reads,
                                std::vector<AlignedBuffer>* bufs,
                                std::vector<std::pair<size_t, size_t>>* op_probes) {
  std::sort(probes.begin(), probes.end(), [](const Probe& a, const Probe& b) {
    return std::tie(a.where.segment, a.where.block) < std::tie(b.where.segment, b.where.block);
  });
  std::vector<ReadOp> ops;
  for (size_t i = 0; i < probes.size();) {
    size_t j = i + 1;
    uint64_t len = probes[i].len;
    while (j < probes.size() && probes[j].where.segment == probes[i].where.segment &&
           uint64_t{probes[j].where.block} * kBlockSize == uint64_t{probes[i].where.block} * kBlockSize + len) {
      len += probes[j].len;
      ++j;
    }
    bufs->push_back(AllocateAligned(len));
    uint64_t off = 0;
    bool demand = false;
    for (size_t k = i; k < j; ++k) {
      probes[k].buf = bufs->back().get() + off;
      off += probes[k].len;
      demand = demand || !reads[probes[k].read].prefetch;
    }
    ReadOp op;
    op.file = probes[i].file.get();
    op.offset = uint64_t{probes[i].where.block} * kBlockSize;
    op.length = len;
    op.buf = bufs->back().get();
    op.prefetch = !demand;
    ops.push_back(op);
    op_probes->emplace_back(i, j);
    i = j;
  }
  return ops;
}

// The probe keys of the fallback reads, sliced from their K records.
Status SliceFromK(ChunkStore::Impl& s, std::span<ProbeRead> reads, const std::vector<size_t>& fallback,
                  RowReadStats* st) TIERKV_EXCLUDES(s.mu_) {
  const uint64_t pb = s.opts_.probe_bytes, rb = s.opts_.row_bytes;
  std::vector<ChunkRead> kreads;
  std::vector<std::vector<char>> kbufs;
  {
    MutexLock l(&s.mu_);
    for (size_t i : fallback) {
      const ProbeRead& r = reads[i];
      const uint32_t n = s.tree_.IsLive(r.chunk) ? s.tree_.chunk(r.chunk).tokens : 0;
      kbufs.emplace_back(size_t{n} * rb);
      kreads.push_back(ChunkRead{r.chunk, r.prefix_hash, r.layer, kbufs.back().data(), nullptr});
    }
  }
  RowReadStats more;
  RETURN_IF_ERROR(s.Read(kreads, &more));
  st->Add(more);
  for (size_t n = 0; n < fallback.size(); ++n) {
    ProbeRead& r = reads[fallback[n]];
    r.status = kreads[n].status;
    if (!r.status.ok()) continue;
    const size_t tokens = kbufs[n].size() / rb;
    for (size_t t = 0; t < tokens; ++t) std::memcpy(r.out + t * pb, kbufs[n].data() + t * rb, pb);
  }
  return Status::Ok();
}

}  // namespace

Status ChunkStore::Impl::ReadProbeKeys(std::span<ProbeRead> reads, RowReadStats* out_stats) {
  if (opts_.probe_bytes == 0) {
    return Status::InvalidArgument("store probe read: the store was opened without probe_bytes");
  }
  ProbePlan plan;
  {
    MutexLock l(&mu_);
    for (size_t i = 0; i < reads.size(); ++i) PlanProbe(*this, reads, i, &plan);
  }
  std::vector<AlignedBuffer> bufs;
  std::vector<std::pair<size_t, size_t>> op_probes;
  std::vector<ReadOp> ops = MergeProbes(plan.probes, reads, &bufs, &op_probes);
  RETURN_IF_ERROR(ReadOnSide(ops));
  RowReadStats st;
  st.ios = ops.size();
  uint64_t corrupt = 0, errors = 0;
  for (size_t o = 0; o < ops.size(); ++o) {
    st.bytes += ops[o].done;
    for (size_t k = op_probes[o].first; k < op_probes[o].second; ++k) {
      Probe& p = plan.probes[k];
      ProbeRead& r = reads[p.read];
      p.status = ops[o].status;
      const uint64_t end = static_cast<uint64_t>(p.buf - ops[o].buf) + p.len;
      if (p.status.ok() && ops[o].done < end) p.status = Status::Corruption("probe record cut short");
      if (p.status.ok()) p.status = checker_.Verify(p.buf, p.expect);
      ++st.records;
      st.pages += p.len / kBlockSize - 1;
      if (p.status.ok()) {
        std::memcpy(r.out, p.buf + kBlockSize, size_t{p.expect.tokens} * opts_.probe_bytes);
        r.from_probe_record = true;
        continue;
      }
      p.status.IsCorruption() ? ++corrupt : ++errors;
      TIERKV_LOG(kWarn) << "store: probe record of chunk " << r.chunk << " layer " << r.layer << " at "
                        << SegmentPath(p.where.segment) << " block " << p.where.block << ": "
                        << p.status.ToString() << "; reading its K record instead";
      if (p.status.IsCorruption()) {
        // Only a copy: dropped for every layer, the chunk stays.
        MutexLock l(&mu_);
        if (IsCurrentLocked(r.chunk, r.prefix_hash)) DropProbeCopyLocked(r.chunk);
      }
      plan.fallback.push_back(p.read);
    }
  }
  CountRead(st, corrupt, errors);
  Count([&](StoreStats& s) {
    s.probe_reads += reads.size();
    s.probe_fallbacks += plan.fallback.size();
  });
  if (!plan.fallback.empty()) RETURN_IF_ERROR(SliceFromK(*this, reads, plan.fallback, &st));
  if (out_stats) *out_stats = st;
  return Status::Ok();
}

}  // namespace tierkv::store

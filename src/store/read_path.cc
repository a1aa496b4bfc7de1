// Whole-record reads (Read): planned under the index lock, read in slices
// through the registered staging arena under the I/O lock, verified and
// copied out while the arena is ours; failures handled after both locks are
// released. And the backends: the main one (with the arena) and the side
// ones for reads into callers' own buffers.
#include <algorithm>
#include <cstring>

#include "store/store_impl.h"
#include "tierkv/logging.h"

namespace tierkv::store {
namespace {

// One chunk layer being read.
struct Pending {
  ChunkRead* read;
  Location where;
  uint64_t prefix_hash;
  uint32_t first_token, tokens;
  uint64_t len;
  std::shared_ptr<RandomAccessFile> file;
  Status status;
  uint64_t done = 0;
};

}  // namespace

Status ChunkStore::Impl::ReadOnSide(std::span<ReadOp> ops) {
  IoBackend* io = nullptr;
  {
    MutexLock l(&side_mu_);
    while (side_free_.empty()) side_cv_.Wait(&side_mu_);
    io = side_free_.back();
    side_free_.pop_back();
  }
  Status s = io->Read(ops);
  {
    MutexLock l(&side_mu_);
    side_free_.push_back(io);
  }
  side_cv_.Signal();
  return s;
}

void ChunkStore::Impl::CountRead(const RowReadStats& st, uint64_t corrupt, uint64_t errors) const {
  Count([&](StoreStats& s) {
    s.records_read += st.records;
    s.reordered_records_read += st.reordered_records;
    s.pages_read += st.pages;
    s.bytes_read += st.bytes;
    s.corrupt_records += corrupt;
    s.read_errors += errors;
  });
}

Status ChunkStore::Impl::ReadOnMain(std::span<ReadOp> ops) {
  MutexLock io(&io_mu_);
  return io_->Read(ops);
}

namespace {

// The reads of `reads` that can be issued, with where their records are.
std::vector<Pending> PlanReads(ChunkStore::Impl& s, std::span<ChunkRead> reads)
    TIERKV_REQUIRES(s.mu_) {
  std::vector<Pending> pending;
  for (ChunkRead& r : reads) {
    if (r.layer >= s.opts_.layers) {
      r.status = Status::InvalidArgument("store read: layer " + std::to_string(r.layer) + " of " +
                                         std::to_string(s.opts_.layers));
      continue;
    }
    if (!s.IsCurrentLocked(r.chunk, r.prefix_hash)) {
      r.status = Status::NotFound("store read: chunk " + std::to_string(r.chunk) + " not stored");
      continue;
    }
    const index::ChunkInfo& c = s.tree_.chunk(r.chunk);
    const Location where = s.table_.LocationOf(r.chunk, r.layer);
    auto file = s.ReaderForLocked(where.segment);
    if (!file.ok()) {
      r.status = file.status();
      continue;
    }
    s.table_.Touch(r.chunk);
    pending.push_back(Pending{&r, where, c.prefix_hash, c.first_token, c.tokens,
                              s.record_bytes(c.tokens), *file});
  }
  return pending;
}

// Verifies one record read into op.buf and copies its halves out.
Status Deliver(const ChunkStore::Impl& s, Pending& p, const ReadOp& op) {
  ChunkRead& r = *p.read;
  p.done = op.done;
  Status st = op.status;
  if (st.ok() && op.done < op.length) st = Status::Corruption("record cut short at end of segment");
  if (st.ok()) st = s.checker_.Verify(op.buf, KeyValueExpect(r.layer, p.prefix_hash, p.first_token, p.tokens));
  if (st.ok()) {
    const size_t half = size_t{p.tokens} * s.opts_.row_bytes;
    if (r.k) std::memcpy(r.k, op.buf + kBlockSize, half);
    if (r.v) std::memcpy(r.v, op.buf + kBlockSize + half, half);
  }
  return st;
}

// Reads pending[i..] that fit the arena (or one record larger than it)
// into *ops; returns the index after the slice.
size_t Slice(ChunkStore::Impl& s, std::vector<Pending>& pending, size_t i, std::vector<ReadOp>* ops,
             std::vector<AlignedBuffer>* own) TIERKV_REQUIRES(s.io_mu_) {
  size_t j = i;
  uint64_t used = 0;
  for (; j < pending.size(); ++j) {
    Pending& p = pending[j];
    char* buf = nullptr;
    if (s.arena_ && used + p.len <= s.arena_bytes_) {
      buf = s.arena_.get() + used;
      used += p.len;
    } else if (j == i) {
      own->push_back(AllocateAligned(p.len));
      buf = own->back().get();
    } else {
      break;
    }
    ReadOp op;
    op.file = p.file.get();
    op.offset = uint64_t{p.where.block} * kBlockSize;
    op.length = p.len;
    op.buf = buf;
    op.prefetch = p.read->prefetch;
    ops->push_back(op);
    if (!own->empty()) return j + 1;
  }
  return j;
}

}  // namespace

Status ChunkStore::Impl::Read(std::span<ChunkRead> reads, RowReadStats* out_stats) {
  std::vector<Pending> pending;
  {
    MutexLock l(&mu_);
    pending = PlanReads(*this, reads);
  }
  // Demand reads first, then prefetches; in slices that fit the staging
  // arena (registered with io_uring, so no page pinning per read).
  std::stable_partition(pending.begin(), pending.end(),
                        [](const Pending& p) { return !p.read->prefetch; });
  uint64_t ios = 0, pages = 0;
  for (size_t i = 0; i < pending.size();) {
    MutexLock io(&io_mu_);
    std::vector<ReadOp> ops;
    std::vector<AlignedBuffer> own;  // a record larger than the whole arena
    const size_t j = Slice(*this, pending, i, &ops, &own);
    RETURN_IF_ERROR(io_->Read(ops));
    ios += ops.size();
    for (size_t k = 0; k < ops.size(); ++k) {
      pages += ops[k].length / kBlockSize - 1;
      pending[i + k].status = Deliver(*this, pending[i + k], ops[k]);
    }
    i = j;
  }
  // Failures are handled after the I/O lock is released (the index lock is
  // never taken under it).
  uint64_t bytes = 0, records = 0, corrupt = 0, errors = 0;
  for (Pending& p : pending) {
    ChunkRead& r = *p.read;
    bytes += p.done;
    if (p.status.ok()) {
      ++records;
      r.status = Status::Ok();
      continue;
    }
    const std::string where = SegmentPath(p.where.segment) + " block " + std::to_string(p.where.block);
    r.status = p.status.WithContext("chunk " + std::to_string(r.chunk) + " layer " +
                                    std::to_string(r.layer) + " at " + where);
    if (!p.status.IsCorruption()) {
      ++errors;
      continue;
    }
    ++corrupt;
    TIERKV_LOG(kWarn) << "store: " << r.status.ToString() << "; the chunk and its descendants leave the index";
    MutexLock l(&mu_);
    DropCorruptLocked(r.chunk, p.prefix_hash);
  }
  if (out_stats) *out_stats = RowReadStats{pending.size(), 0, pages, bytes, ios};
  Count([&](StoreStats& s) {
    s.records_read += records;
    s.bytes_read += bytes;
    s.corrupt_records += corrupt;
    s.read_errors += errors;
  });
  return Status::Ok();
}

}  // namespace tierkv::store

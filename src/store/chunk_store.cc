// The front door, opening, Put, lookup, eviction and the manifest
// (store_impl.h lists where the other parts are).
#include "store/chunk_store.h"

#include <algorithm>
#include <chrono>
#include <queue>
#include <set>
#include <unordered_map>

#include "store/cache_dir.h"
#include "store/manifest.h"
#include "store/store_impl.h"
#include "tierkv/logging.h"

namespace tierkv::store {

// ---- the front door

ChunkStore::ChunkStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChunkStore::~ChunkStore() = default;

Result<PutResult> ChunkStore::Put(std::span<const int32_t> tokens, const KvInput& kv) {
  return impl_->Put(tokens, kv);
}
LookupResult ChunkStore::Lookup(std::span<const int32_t> tokens, uint64_t ns) {
  return impl_->Lookup(tokens, ns);
}
Status ChunkStore::Read(std::span<ChunkRead> reads, RowReadStats* stats) {
  return impl_->Read(reads, stats);
}
Status ChunkStore::ReadRows(std::span<RowRead> reads, RowReadStats* stats) {
  return impl_->ReadRows(reads, stats);
}
Status ChunkStore::ReadProbeKeys(std::span<ProbeRead> reads, RowReadStats* stats) {
  return impl_->ReadProbeKeys(reads, stats);
}
void ChunkStore::ReportImportance(const LookupResult& prefix, uint16_t layer,
                                  std::span<const float> importance) {
  impl_->ReportImportance(prefix, layer, importance);
}
Result<ReorderResult> ChunkStore::Reorder(const ReorderOptions& options) {
  return impl_->Reorder(options);
}
Status ChunkStore::Checkpoint() { return impl_->Checkpoint(); }
Result<uint64_t> ChunkStore::DropAll() { return impl_->DropAll(); }
Result<CompactResult> ChunkStore::Compact(double min_dead_fraction) {
  return impl_->Compact(min_dead_fraction);
}
StoreStats ChunkStore::stats() const { return impl_->stats(); }
Status ChunkStore::CheckDirectory() {
  if (impl_->opts_.read_only) return Status::Ok();
  MutexLock w(&impl_->write_mu_);
  return impl_->CheckDirectoryHeld();
}
Result<VerifyReport> ChunkStore::Verify(bool repair) { return impl_->Verify(repair); }
const StoreOptions& ChunkStore::options() const { return impl_->opts_; }

const IoCostModel& ChunkStore::io_model() const { return impl_->io_model_; }
uint64_t ChunkStore::record_bytes(uint32_t tokens) const { return impl_->record_bytes(tokens); }
uint64_t ChunkStore::probe_record_bytes(uint32_t tokens) const {
  return impl_->probe_record_bytes(tokens);
}
std::string ChunkStore::SegmentPath(uint32_t segment) const { return impl_->SegmentPath(segment); }

size_t ChunkStore::TableBytesPerChunk() { return ChunkTable::kBytesPerChunk; }

ChunkStore::Location ChunkStore::TEST_location(uint32_t chunk, uint16_t layer) const {
  MutexLock l(&impl_->mu_);
  if (!impl_->tree_.IsLive(chunk)) return Location{};
  return impl_->table_.LocationOf(chunk, layer);
}

std::vector<std::pair<uint32_t, uint64_t>> ChunkStore::LiveBytesBySegment() const {
  std::unordered_map<uint32_t, uint64_t> live;
  {
    MutexLock l(&impl_->mu_);
    live = impl_->LiveBytesBySegmentLocked();
  }
  std::vector<std::pair<uint32_t, uint64_t>> out(live.begin(), live.end());
  std::sort(out.begin(), out.end());
  return out;
}

ChunkStore::Location ChunkStore::TEST_run_location(uint32_t chunk, uint16_t layer,
                                                  uint32_t record) const {
  MutexLock l(&impl_->mu_);
  const std::shared_ptr<const Run>& run = impl_->runs_.Of(chunk);
  if (!run || record >= run->records || layer >= impl_->opts_.layers) return Location{};
  return run->where[size_t{layer} * run->records + record];
}

std::vector<std::vector<uint16_t>> ChunkStore::RowOrder(uint32_t chunk, uint64_t prefix_hash) const {
  const uint16_t L = impl_->opts_.layers;
  std::shared_ptr<const Run> run;
  uint32_t first = 0, tokens = 0;
  std::vector<std::vector<uint16_t>> order(L);
  {
    MutexLock l(&impl_->mu_);
    if (!impl_->IsCurrentLocked(chunk, prefix_hash)) return {};
    tokens = impl_->tree_.chunk(chunk).tokens;
    run = impl_->runs_.Of(chunk);
    if (run) {
      first = impl_->tree_.chunk(chunk).first_token - run->first_token;
    } else {
      // No packed layout yet: the requests' reports, where a layer has some
      // (the order a reordering round would write).
      auto ht = impl_->heat_.find(chunk);
      if (ht == impl_->heat_.end() || ht->second.prefix_hash != prefix_hash) return {};
      const uint32_t C = impl_->opts_.chunk_tokens;
      bool any = false;
      for (uint16_t l = 0; l < L; ++l) {
        if (ht->second.reports[l] == 0) continue;
        const std::span<const float> sum(ht->second.sum.data() + size_t{l} * C, tokens);
        for (uint32_t r : index::MappingList::OrderByScore(sum)) order[l].push_back(static_cast<uint16_t>(r));
        any = true;
      }
      if (!any) return {};
      return order;
    }
  }
  // The run's rows in slot order, those of this chunk kept (a run's slots
  // are its rows by descending importance, across its chunks).
  for (uint16_t l = 0; l < run->map.layers(); ++l) {
    order[l].reserve(tokens);
    for (uint32_t row : run->map.RowsOf(l)) {
      if (row >= first && row < first + tokens) order[l].push_back(static_cast<uint16_t>(row - first));
    }
  }
  return order;
}

// ---- opening

void SetDiskBudget(StoreOptions* o, uint64_t bytes) {
  o->disk_budget_bytes = bytes - bytes / 4;
  o->max_dead_bytes = bytes / 4;
  if (bytes != 0) o->segment_bytes = std::min(o->segment_bytes, std::max<uint64_t>(1u << 20, bytes / 16));
}

namespace {

Status CheckOptions(const StoreOptions& o) {
  if (o.dir.empty()) return Status::InvalidArgument("store: cache directory not set");
  if (o.chunk_tokens < 1 || o.chunk_tokens > 4096) {
    return Status::InvalidArgument("store: chunk_tokens " + std::to_string(o.chunk_tokens) +
                                   " is outside 1..4096");
  }
  if (o.layers < 1) return Status::InvalidArgument("store: layers is 0");
  RETURN_IF_ERROR(CheckGeometry(RecordKind::kKeyValue, o.chunk_tokens, o.row_bytes).WithContext("store"));
  if (o.probe_bytes > o.row_bytes) {
    return Status::InvalidArgument("store: probe_bytes " + std::to_string(o.probe_bytes) +
                                   " exceeds row_bytes " + std::to_string(o.row_bytes) +
                                   " (probe keys are the start of a K row)");
  }
  if (o.probe_bytes != 0) {
    RETURN_IF_ERROR(CheckGeometry(RecordKind::kProbeKeys, o.chunk_tokens, o.probe_bytes)
                        .WithContext("store probe records"));
  }
  if (o.segment_bytes < (1u << 20)) return Status::InvalidArgument("store: segment_bytes below 1 MiB");
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<ChunkStore>> ChunkStore::Open(StoreOptions options) {
  RETURN_IF_ERROR(CheckOptions(options));
  auto impl = std::make_unique<Impl>(std::move(options));
  const StoreOptions& o = impl->opts_;
  const uint64_t one_chunk = impl->ChunkRecordBytes(o.chunk_tokens);
  if (o.disk_budget_bytes != 0 && o.disk_budget_bytes < one_chunk) {
    return Status::InvalidArgument(
        "store: disk budget " + std::to_string(o.disk_budget_bytes) +
        " bytes is smaller than one token chunk of " + std::to_string(o.chunk_tokens) +
        " tokens over " + std::to_string(o.layers) + " layers (" + std::to_string(one_chunk) +
        " bytes)");
  }
  RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<ChunkStore>(new ChunkStore(std::move(impl)));
}

ChunkStore::Impl::Impl(StoreOptions options)
    : opts_(std::move(options)),
      fs_(opts_.fs ? opts_.fs : FileSystem::Default()),
      checker_(opts_.fingerprint, opts_.row_bytes, opts_.dtype, opts_.chunk_tokens),
      writer_(fs_, opts_.dir, opts_.segment_bytes),
      tree_(opts_.chunk_tokens),
      table_(opts_.layers, opts_.row_bytes, opts_.eviction_half_life) {}

ChunkStore::Impl::~Impl() {
  bool dirty;
  {
    MutexLock l(&mu_);
    dirty = dirty_;
  }
  // A lost directory gets no manifest: its path may be another store's now.
  if (dirty && !opts_.read_only && opts_.checkpoint_on_close && !directory_lost_) {
    Status s = Checkpoint();
    if (!s.ok()) {
      TIERKV_LOG(kWarn) << "store " << opts_.dir << ": no manifest at close (" << s.ToString()
                        << "); the next open scans the segments";
    }
  }
}

Status ChunkStore::Impl::Init() {
  {
    MutexLock io(&io_mu_);
    ASSIGN_OR_RETURN(io_, NewIoBackend(opts_.disk.io_backend, IoOptions{opts_.queue_depth}));
    if (opts_.io_arena_bytes >= kBlockSize) {
      arena_bytes_ = opts_.io_arena_bytes / kBlockSize * kBlockSize;
      arena_ = AllocateAligned(arena_bytes_);
      Status reg = io_->RegisterBuffer(arena_.get(), arena_bytes_);
      if (!reg.ok()) {
        // Still correct, only slower: reads then pin pages per request.
        TIERKV_LOG(kInfo) << "store " << opts_.dir << ": read arena not registered with "
                          << io_->name() << " (" << reg.ToString() << ")";
      }
    }
  }
  for (uint32_t i = 0; i < std::max<uint32_t>(1, opts_.side_readers); ++i) {
    ASSIGN_OR_RETURN(auto side, NewIoBackend(opts_.disk.io_backend, IoOptions{opts_.queue_depth}));
    MutexLock l(&side_mu_);
    side_free_.push_back(side.get());
    side_io_.push_back(std::move(side));
  }
  RETURN_IF_ERROR(PrepareCacheDir(opts_, fs_, &lock_));
  LoadIoModel();
  return Recover();
}

void ChunkStore::Impl::LoadIoModel() {
  // Measuring and the machine's identity need OS files.
  if (fs_ != FileSystem::Default()) return;
  MutexLock io(&io_mu_);
  auto here = MachineOf(opts_.dir, *io_);
  if (!here.ok()) return;
  auto saved = LoadSavedIoModel(opts_.dir, *here);
  if (saved.ok()) {
    io_model_ = *saved;
    return;
  }
  if (!opts_.disk.calibrate_io || opts_.read_only || !opts_.disk.direct_io) return;  // the default
  auto measured = CalibrateIo(opts_.dir, *io_);
  if (!measured.ok()) {
    TIERKV_LOG(kWarn) << "store " << opts_.dir << ": " << measured.status().ToString()
                      << "; reads planned with the default cost model";
    return;
  }
  io_model_ = *measured;
  if (Status s = SaveIoModel(opts_.dir, io_model_); !s.ok()) {
    // Still usable; the next open measures again.
    TIERKV_LOG(kWarn) << "store " << opts_.dir << ": io model not saved (" << s.ToString() << ")";
  }
}

uint64_t ChunkStore::Impl::record_bytes(uint32_t tokens) const {
  return uint64_t{kBlockSize} *
         (1 + PagesFor(PayloadBytesFor(RecordKind::kKeyValue, tokens, opts_.row_bytes)));
}

uint64_t ChunkStore::Impl::probe_record_bytes(uint32_t tokens) const {
  if (opts_.probe_bytes == 0) return 0;
  return uint64_t{kBlockSize} *
         (1 + PagesFor(PayloadBytesFor(RecordKind::kProbeKeys, tokens, opts_.probe_bytes)));
}

uint64_t ChunkStore::Impl::ChunkRecordBytes(uint32_t tokens) const {
  return opts_.layers * (record_bytes(tokens) + probe_record_bytes(tokens));
}

std::string ChunkStore::Impl::SegmentPath(uint32_t segment) const {
  return store::SegmentPath(opts_.dir, segment);
}

// ---- segments and readers

bool ChunkStore::Impl::IsCurrentLocked(uint32_t chunk, uint64_t prefix_hash) const {
  return tree_.IsLive(chunk) && tree_.chunk(chunk).prefix_hash == prefix_hash;
}

Result<std::shared_ptr<RandomAccessFile>> ChunkStore::Impl::ReaderForLocked(uint32_t segment) {
  if (segment < readers_.size() && readers_[segment]) return readers_[segment];
  return Status::IOError(SegmentPath(segment) + ": not open for reading");
}

Status ChunkStore::Impl::OpenReader(uint32_t segment) {
  FileOptions fo;
  fo.direct_io = opts_.disk.direct_io;
  fo.no_follow = true;
  ASSIGN_OR_RETURN(std::shared_ptr<RandomAccessFile> file,
                   fs_->NewRandomAccessFile(SegmentPath(segment), fo));
  MutexLock l(&mu_);
  if (readers_.size() <= segment) readers_.resize(size_t{segment} + 1);
  readers_[segment] = std::move(file);
  return Status::Ok();
}

Status ChunkStore::Impl::CheckDirectoryHeld() {
  if (lock_ == nullptr) return Status::Ok();  // read-only: writes nothing
  if (!directory_lost_) {
    // Two stat calls (FileLock::CheckInPlace): cheap beside any write.
    const Status s = lock_->CheckInPlace();
    if (s.ok()) return s;
    directory_lost_ = true;
    directory_lost_why_ = s.message();
    writer_.Abandon();  // never another byte into a file no path reaches
    Count([](StoreStats& st) { st.directory_lost = true; });
    TIERKV_LOG(kError) << "store: cache directory " << opts_.dir << " was removed or replaced ("
                       << directory_lost_why_ << "); storing stopped, reads go on from the open files";
  }
  return Status::IOError("cache directory " + opts_.dir + " was removed or replaced; storing stopped (" +
                         directory_lost_why_ + ")");
}

Status ChunkStore::Impl::OpenSegment() {
  RETURN_IF_ERROR(CheckDirectoryHeld());
  uint32_t opened = 0;
  RETURN_IF_ERROR(writer_.OpenNext(&opened));
  ++segment_count_;
  return OpenReader(opened);
}

ChunkStore::Impl::WriteMark ChunkStore::Impl::Mark() const {
  if (writer_.open()) return WriteMark{writer_.last(), writer_.size()};
  return WriteMark{writer_.last() + 1, 0};
}

void ChunkStore::Impl::ReclaimFailedWrite(WriteMark from, uint64_t bytes) {
  const uint32_t last = writer_.last();
  writer_.Abandon();  // the next write starts a fresh segment
  // The paths may name another store's files now: the bytes stay dead.
  if (directory_lost_) return;
  std::vector<uint32_t> deleted;
  bool kept = false;
  for (uint32_t seg = from.segment; seg <= last; ++seg) {
    const std::string path = SegmentPath(seg);
    if (!fs_->FileExists(path)) continue;
    const bool cut = seg == from.segment && from.offset > 0;
    Status s = cut ? fs_->Truncate(path, from.offset) : fs_->DeleteFile(path);
    if (!s.ok()) {
      // Recovery skips the partial records; the bytes wait for compaction.
      TIERKV_LOG(kWarn) << "store " << opts_.dir << ": the failed write's bytes stay in " << path << " ("
                        << s.ToString() << ")";
      kept = true;
    } else if (!cut) {
      deleted.push_back(seg);
    }
  }
  if (!deleted.empty()) {
    if (Status s = fs_->SyncDir(opts_.dir); !s.ok()) {
      TIERKV_LOG(kWarn) << "store " << opts_.dir << ": " << s.ToString();  // a crash may bring them back: torn, skipped
    }
    segment_count_ -= std::min<size_t>(segment_count_, deleted.size());
  }
  MutexLock l(&mu_);
  for (uint32_t seg : deleted) {
    if (seg < readers_.size()) readers_[seg].reset();
  }
  if (kept) dead_bytes_ += bytes;
}

// ---- the index: publishing, dropping, eviction

void ChunkStore::Impl::DropLocked(uint32_t chunk, bool corrupt) {
  std::vector<uint64_t> hashes;
  auto removed = tree_.Truncate(chunk, &hashes);
  if (!removed.ok()) return;
  dirty_ = true;
  for (size_t i = 0; i < removed->size(); ++i) {
    const uint32_t id = (*removed)[i];
    // The bytes stay in their segment (dead) until compaction.
    const uint64_t bytes = ChunkBytesLocked(id);
    live_bytes_ -= bytes;
    dead_bytes_ += bytes;
    for (const Location& at : table_.LocationsOf(id)) known_headers_.Erase(at);
    table_.Clear(id);
    ForgetChunkLocked(id, hashes[i]);
  }
  if (corrupt) Count([&](StoreStats& s) { s.dropped_chunks += removed->size(); });
}

void ChunkStore::Impl::DropCorruptLocked(uint32_t chunk, uint64_t prefix_hash) {
  if (IsCurrentLocked(chunk, prefix_hash)) DropLocked(chunk, /*corrupt=*/true);
}

void ChunkStore::Impl::DropProbeCopyLocked(uint32_t chunk) {
  if (!table_.HasProbes(chunk)) return;
  const uint64_t bytes = opts_.layers * probe_record_bytes(table_.Tokens(chunk));
  table_.ClearProbes(chunk);
  live_bytes_ -= bytes;
  dead_bytes_ += bytes;
  dirty_ = true;
}

uint64_t ChunkStore::Impl::ChunkBytesLocked(uint32_t chunk) const {
  const uint32_t n = table_.Tokens(chunk);
  return opts_.layers * (record_bytes(n) + (table_.HasProbes(chunk) ? probe_record_bytes(n) : 0));
}

Status ChunkStore::Impl::EvictForLocked(uint64_t bytes) {
  if (opts_.disk_budget_bytes == 0 || live_bytes_ + bytes <= opts_.disk_budget_bytes) {
    return Status::Ok();
  }
  RETURN_IF_ERROR(EvictUntilLocked(bytes <= opts_.disk_budget_bytes ? opts_.disk_budget_bytes - bytes : 0));
  if (bytes > opts_.disk_budget_bytes) return Status::ResourceExhausted("store: disk budget full");
  return Status::Ok();
}

Status ChunkStore::Impl::EvictUntilLocked(uint64_t live_target) {
  if (live_bytes_ <= live_target) return Status::Ok();
  // Least valuable evictable leaf tail first. One scan of the tree for the
  // candidates; each eviction may expose the chunk before it as a new tail.
  using Entry = std::pair<double, uint32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (uint32_t c : tree_.EvictableChunks()) heap.emplace(table_.Value(c), c);
  while (live_bytes_ > live_target) {
    if (heap.empty()) return Status::ResourceExhausted("store: disk budget full");
    const auto [value, victim] = heap.top();
    heap.pop();
    if (!tree_.IsEvictable(victim) || table_.Value(victim) != value) continue;  // stale entry
    const uint32_t before = tree_.ParentChunk(victim);
    const uint64_t freed = ChunkBytesLocked(victim);
    const uint64_t hash = tree_.chunk(victim).prefix_hash;
    RETURN_IF_ERROR(tree_.Evict(victim));
    for (const Location& at : table_.LocationsOf(victim)) known_headers_.Erase(at);
    table_.Clear(victim);
    ForgetChunkLocked(victim, hash);
    live_bytes_ -= freed;
    dead_bytes_ += freed;
    dirty_ = true;
    if (before != index::kNoChunk && tree_.IsEvictable(before)) heap.emplace(table_.Value(before), before);
    Count([](StoreStats& s) { ++s.evicted_chunks; });
  }
  return Status::Ok();
}

bool ChunkStore::Impl::EmptySegmentLocked() {
  const std::unordered_map<uint32_t, uint64_t> live = LiveBytesBySegmentLocked();
  uint32_t victim = 0;
  for (const auto& [seg, bytes] : live) {
    if (bytes > 0 && (victim == 0 || bytes < live.at(victim) || (bytes == live.at(victim) && seg < victim))) {
      victim = seg;
    }
  }
  if (victim == 0) return false;
  std::vector<uint32_t> chunks;
  for (uint32_t id : tree_.LiveChunks()) {
    bool there = table_.ProbeLocationOf(id, 0).segment == victim;
    for (const Location& at : table_.LocationsOf(id)) there = there || at.segment == victim;
    if (there) chunks.push_back(id);
  }
  std::vector<uint32_t> runs;
  for (const auto& run : runs_.Runs()) {
    for (const Location& at : run->where) {
      if (at.segment == victim) runs.push_back(run->chunks[0]);
    }
  }
  for (uint32_t c : runs) DropRunLocked(c);
  const size_t before = tree_.num_chunks();
  for (uint32_t id : chunks) {
    if (tree_.IsLive(id)) DropLocked(id, /*corrupt=*/false);
  }
  const size_t evicted = before - tree_.num_chunks();
  Count([&](StoreStats& s) { s.evicted_chunks += evicted; });
  TIERKV_LOG(kWarn) << "store " << opts_.dir << ": the disk is full: " << evicted << " chunks with records in "
                    << SegmentPath(victim) << " evicted so that it can be deleted";
  return true;
}

Result<ChunkStore::Impl::Published> ChunkStore::Impl::PublishLocked(
    const std::vector<uint32_t>& created, const std::function<const Placed*(uint64_t)>& where_of) {
  Published out;
  for (uint32_t id : created) {
    const Placed* where = where_of(tree_.chunk(id).prefix_hash);
    if (where == nullptr) {
      // The tree changed between plan and publish (a concurrent drop), or a
      // recovered chain is short: never leave a chunk without data indexed.
      RETURN_IF_ERROR(tree_.Truncate(id).status());
      break;
    }
    table_.Add(id, static_cast<uint16_t>(tree_.chunk(id).tokens), where->where,
               opts_.probe_bytes != 0 ? where->probe_block : ChunkTable::kNoProbe,
               where->probe_stride);
    const uint64_t bytes = ChunkBytesLocked(id);
    live_bytes_ += bytes;
    out.bytes += bytes;
    ++out.chunks;
  }
  return out;
}

LookupResult ChunkStore::Impl::Lookup(std::span<const int32_t> tokens, uint64_t ns) {
  MutexLock l(&mu_);
  index::Match m = tree_.Lookup(tokens, ns);
  LookupResult out;
  out.matched_tokens = m.matched_tokens;
  out.chunks = std::move(m.chunks);
  for (uint32_t id : out.chunks) {
    out.chunk_tokens.push_back(tree_.chunk(id).tokens);
    out.prefix_hashes.push_back(tree_.chunk(id).prefix_hash);
  }
  return out;
}

// ---- the manifest and statistics

ManifestChunk ChunkStore::Impl::ManifestChunkLocked(uint32_t id, std::set<uint32_t>* used) const {
  const index::ChunkInfo& c = tree_.chunk(id);
  ManifestChunk mc;
  mc.prefix_hash = c.prefix_hash;
  const uint32_t parent = tree_.ParentChunk(id);
  mc.parent_hash = parent == index::kNoChunk ? tree_.NamespaceOf(id) : tree_.chunk(parent).prefix_hash;
  mc.first_token = c.first_token;
  auto t = tree_.ChunkTokens(id);
  mc.tokens.assign(t.begin(), t.end());
  for (uint16_t layer = 0; layer < opts_.layers; ++layer) {
    const Location w = table_.LocationOf(id, layer);
    mc.where.emplace_back(w.segment, w.block);
    used->insert(w.segment);
  }
  mc.probe_block = table_.ProbeBlock(id);
  mc.probe_stride = table_.ProbeStride(id);
  // The K/V records' page checksums, if every layer's header is known.
  for (uint16_t layer = 0; layer < opts_.layers; ++layer) {
    const auto k = known_headers_.Find(table_.LocationOf(id, layer),
                                       KeyValueExpect(layer, c.prefix_hash, c.first_token, c.tokens));
    if (!k || (layer > 0 && k->page_checksums.size() != mc.pages)) {
      mc.pages = 0;
      mc.page_checksums.clear();
      break;
    }
    mc.pages = static_cast<uint32_t>(k->page_checksums.size());
    mc.page_checksums.insert(mc.page_checksums.end(), k->page_checksums.begin(), k->page_checksums.end());
  }
  return mc;
}

ManifestRun ChunkStore::Impl::ManifestRunOf(const Run& run, std::set<uint32_t>* used) const {
  ManifestRun mr;
  mr.first_token = run.first_token;
  mr.rows = run.rows;
  mr.records = run.records;
  mr.end_hash = run.end_hash;
  mr.parent_hash = run.parent_hash;
  mr.hashes = run.hashes;
  for (const Location& w : run.where) {
    mr.where.emplace_back(w.segment, w.block);
    used->insert(w.segment);
  }
  for (uint16_t layer = 0; layer < opts_.layers; ++layer) {
    for (uint32_t row = 0; row < run.rows; ++row) mr.slot_of.push_back(static_cast<uint16_t>(run.map.SlotOf(layer, row)));
  }
  return mr;
}

Status ChunkStore::Impl::WriteManifest() {
  RETURN_IF_ERROR(CheckDirectoryHeld().WithContext("store manifest"));
  Manifest m;
  m.fingerprint = opts_.fingerprint;
  m.chunk_tokens = opts_.chunk_tokens;
  m.layers = opts_.layers;
  m.log_from = writer_.last() + 1;
  m.sequence = sequence_;
  {
    MutexLock l(&mu_);
    std::set<uint32_t> used;
    for (uint32_t id : tree_.LiveChunks()) m.chunks.push_back(ManifestChunkLocked(id, &used));
    for (const auto& run : runs_.Runs()) m.runs.push_back(ManifestRunOf(*run, &used));
    m.segments.assign(used.begin(), used.end());
    dirty_ = false;
  }
  Status s = WriteFileAtomically(fs_, opts_.dir + "/" + kManifestFile, EncodeManifest(m));
  if (!s.ok()) {
    MutexLock l(&mu_);
    dirty_ = true;
  }
  return s.WithContext("store manifest");
}

Result<uint64_t> ChunkStore::Impl::DropAll() {
  if (opts_.read_only) return Status::InvalidArgument("store drop: opened read-only");
  uint64_t dropped = 0;
  {
    MutexLock l(&mu_);
    const size_t before = tree_.num_chunks();
    // Dropping a first chunk drops the chunks after it.
    for (uint32_t id : tree_.LiveChunks()) {
      if (tree_.IsLive(id) && tree_.ParentChunk(id) == index::kNoChunk) DropLocked(id, /*corrupt=*/false);
    }
    dropped = before - tree_.num_chunks();
  }
  RETURN_IF_ERROR(Checkpoint());
  return dropped;
}

Status ChunkStore::Impl::Checkpoint() {
  if (opts_.read_only) return Status::InvalidArgument("store checkpoint: opened read-only");
  MutexLock w(&write_mu_);
  RETURN_IF_ERROR(writer_.Seal().WithContext("store checkpoint"));
  return WriteManifest();
}

StoreStats ChunkStore::Impl::stats() const {
  StoreStats s;
  {
    MutexLock st(&stats_mu_);
    s = stats_;
  }
  MutexLock l(&mu_);
  s.live_chunks = tree_.num_chunks();
  s.nodes = tree_.num_nodes() - 1;
  s.live_bytes = live_bytes_;
  s.dead_bytes = dead_bytes_;
  s.reordered_chunks = runs_.chunks();
  s.reordered_bytes = runs_.bytes();
  s.segments = segment_count_;
  s.budget_bytes = opts_.disk_budget_bytes == 0 ? 0 : opts_.disk_budget_bytes + opts_.max_dead_bytes;
  return s;
}

}  // namespace tierkv::store

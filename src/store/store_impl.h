// ChunkStore's internals (the front door is chunk_store.h). One Impl, its
// member functions in one file per part:
//   chunk_store.cc   the front door's forwarding, opening, lookup, eviction,
//                    dropping, the manifest, statistics
//   put.cc           Put (plan, write, publish)
//   recovery.cc      the index rebuilt from the manifest and the segments:
//                    a plan built from what is found, then applied
//   read_path.cc     whole-record reads through the registered arena, side backends
//   row_reads.cc     selective reads of rows (only their pages)
//   probe_reads.cc   probe-key reads (adjacent records in one read)
//   reorder.cc       importance reports and KV reordering (IMPRESS 4.4.1)
//   compaction.cc    live records of mostly-dead segments moved, segments deleted
// and the parts that stand alone: cache_dir (identity, lock, names),
// chunk_table (per-chunk locations and values), record_check (what a record
// must be), segment_writer (the active segment).
//
// Locks, in the order they may be taken: write_mu_ (serialises Put, Reorder,
// Compact and Checkpoint, held across their I/O; readers never take it),
// mu_ (the index: held around metadata only, never across I/O), io_mu_ (the
// backend and the registered arena: one user at a time; the index lock is
// never taken under it), side_mu_ (the free side backends), stats_mu_.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include "index/radix_tree.h"
#include "store/chunk_store.h"
#include "store/chunk_table.h"
#include "store/header_cache.h"
#include "store/io_model.h"
#include "store/io_backend.h"
#include "store/run_table.h"
#include "store/manifest.h"
#include "store/record_check.h"
#include "store/segment_writer.h"
#include "tierkv/mutex.h"

namespace tierkv::store {

struct RecoveryPlan;

struct ChunkStore::Impl {
  explicit Impl(StoreOptions options);
  ~Impl();

  // ---- chunk_store.cc
  Status Init();
  // Sets io_model_: the saved model of this machine, else (calibrate_io, a
  // writable O_DIRECT open) one measured through io_ and saved, else the
  // default; failures only log.
  void LoadIoModel() TIERKV_EXCLUDES(io_mu_);
  Result<PutResult> Put(std::span<const int32_t> tokens, const KvInput& kv) TIERKV_EXCLUDES(mu_);
  LookupResult Lookup(std::span<const int32_t> tokens, uint64_t ns) TIERKV_EXCLUDES(mu_);
  Status Checkpoint() TIERKV_EXCLUDES(mu_);
  // ChunkStore::CheckDirectory with write_mu_ held: every write by path
  // (a new segment, the manifest, compaction, reordering) calls it first.
  // The first failure sets directory_lost_, abandons the active segment,
  // logs and counts; from then on it fails without looking again.
  Status CheckDirectoryHeld() TIERKV_REQUIRES(write_mu_) TIERKV_EXCLUDES(stats_mu_);
  StoreStats stats() const;
  uint64_t record_bytes(uint32_t tokens) const;
  uint64_t probe_record_bytes(uint32_t tokens) const;
  // Bytes of a chunk's records on disk (K/V and probe copies) for `tokens`.
  uint64_t ChunkRecordBytes(uint32_t tokens) const;
  std::string SegmentPath(uint32_t segment) const;

  // ---- read_path.cc, row_reads.cc, probe_reads.cc
  Status Read(std::span<ChunkRead> reads, RowReadStats* stats) TIERKV_EXCLUDES(mu_, io_mu_);
  Status ReadRows(std::span<RowRead> reads, RowReadStats* stats) TIERKV_EXCLUDES(mu_);
  Status ReadProbeKeys(std::span<ProbeRead> reads, RowReadStats* stats) TIERKV_EXCLUDES(mu_);
  // Reads `ops` through a free side backend (waits for one if all are busy).
  Status ReadOnSide(std::span<ReadOp> ops) TIERKV_EXCLUDES(side_mu_);
  // Reads `ops` through the main backend (background work).
  Status ReadOnMain(std::span<ReadOp> ops) TIERKV_EXCLUDES(io_mu_);

  // ---- reorder.cc
  void ReportImportance(const LookupResult& prefix, uint16_t layer, std::span<const float> importance)
      TIERKV_EXCLUDES(mu_);
  Result<ReorderResult> Reorder(const ReorderOptions& options) TIERKV_EXCLUDES(mu_);
  // The K and V rows (payload pointers) of chunk k of a run at a layer.
  using RunRows = std::function<std::pair<const char*, const char*>(size_t k, uint16_t layer)>;
  // A run's records (kReorderedKeyValue), layer by layer, back to back; the
  // run's map and records are set, tokens[k] are chunk k's tokens.
  // headers: each record's header, in run.where's order (for known_headers_).
  std::string EncodeRunRecords(const Run& run, std::span<const uint16_t> tokens, const RunRows& rows_of,
                               std::vector<KnownHeader>* headers) TIERKV_REQUIRES(write_mu_);
  // Appends a run's encoded records to the active segment (not yet durable;
  // the caller syncs) and fills run.where.
  Status AppendRun(Run& run, const std::string& all) TIERKV_REQUIRES(write_mu_);
  // Swaps a written run's layout in, if every chunk of it is still the one
  // it was written for and the budget holds it; else its bytes are dead.
  bool InstallRunLocked(const std::shared_ptr<Run>& run, uint64_t written,
                        std::vector<KnownHeader> headers) TIERKV_REQUIRES(mu_);

  Result<uint64_t> DropAll() TIERKV_EXCLUDES(mu_, write_mu_);

  // ---- verify.cc
  Result<VerifyReport> Verify(bool repair) TIERKV_EXCLUDES(mu_, write_mu_);

  // ---- compaction.cc
  Result<CompactResult> Compact(double min_dead_fraction) TIERKV_EXCLUDES(mu_);
  // Compaction with write_mu_ held: of the segments at least
  // min_dead_fraction dead, at most `max_victims`, the most dead first.
  Result<CompactResult> CompactHeld(double min_dead_fraction, size_t max_victims)
      TIERKV_REQUIRES(write_mu_) TIERKV_EXCLUDES(mu_);
  // Compacts one segment at a time (the largest dead share first: wholly
  // dead ones are deleted without writing anything, which matters on a full
  // disk) until dead bytes are at most `target` or nothing is left to
  // reclaim. Failures are logged and stop it; the store stays consistent.
  void ReclaimDead(uint64_t target) TIERKV_REQUIRES(write_mu_) TIERKV_EXCLUDES(mu_);
  // Bytes of live records (chunks, probe copies, reordered runs) per segment.
  std::unordered_map<uint32_t, uint64_t> LiveBytesBySegmentLocked() const TIERKV_REQUIRES(mu_);

  // ---- recovery.cc
  Status Recover() TIERKV_EXCLUDES(mu_);
  // The manifest's snapshot into the plan (a damaged or foreign one is
  // counted and ignored: every segment is scanned then).
  void ReadManifest(RecoveryPlan* plan);
  // Segments below the snapshot that it does not use (a compaction that
  // crashed before deleting them): deleted.
  Status DeleteGarbage(const RecoveryPlan& plan);
  // Reads every record of a segment written after the snapshot into the plan.
  Status ScanSegment(uint32_t segment, RecoveryPlan* plan) TIERKV_EXCLUDES(mu_);
  // One verified record found at `at`: into the plan if it is this store's.
  void Found(const RecordHeader& h, Location at, RecoveryPlan* plan) const;
  // Inserts every usable chain into the index.
  Status ApplyLocked(RecoveryPlan& plan) TIERKV_REQUIRES(mu_);
  // After applying: deletes the segments that hold no live record (empty,
  // torn, or only records of evicted or unusable chunks), so that failed or
  // empty segments never accumulate across restarts. Not when read-only.
  Status RemoveDeadSegments(RecoveryPlan* plan) TIERKV_EXCLUDES(mu_);
  // The snapshot's reordered runs whose chunks all came back (a run with a
  // chunk missing or a bad mapping stays dead bytes).
  void InstallRecoveredRunsLocked(const RecoveryPlan& plan) TIERKV_REQUIRES(mu_);
  // The snapshot's page checksums of records still where it saw them, so
  // that row reads after a restart skip their headers too.
  void KnowRecoveredHeadersLocked(const RecoveryPlan& plan) TIERKV_REQUIRES(mu_);

  // ---- shared helpers (chunk_store.cc)
  // Whether `chunk` is live and still the chunk of `prefix_hash` (ids are reused).
  bool IsCurrentLocked(uint32_t chunk, uint64_t prefix_hash) const TIERKV_REQUIRES(mu_);
  // The open reader of a segment. Segments get their reader when they are
  // created or recovered, so this makes no file-system call.
  Result<std::shared_ptr<RandomAccessFile>> ReaderForLocked(uint32_t segment) TIERKV_REQUIRES(mu_);
  // Opens segment `segment`'s reader (no lock held: a file-system call).
  Status OpenReader(uint32_t segment) TIERKV_EXCLUDES(mu_);
  // Starts a new active segment, with its reader.
  Status OpenSegment() TIERKV_REQUIRES(write_mu_) TIERKV_EXCLUDES(mu_);
  // Where the next append lands (a segment not yet created: offset 0 of the
  // next number), taken before a write that may fail.
  struct WriteMark {
    uint32_t segment = 0;
    uint64_t offset = 0;
  };
  WriteMark Mark() const TIERKV_REQUIRES(write_mu_);
  // After a failed write of `bytes` that started at `from`: the segment is
  // abandoned and what the write appended is cut off again (its first
  // segment truncated back to `from`, segments it created deleted), so a
  // failed write leaves no bytes and no empty segment behind. What cannot
  // be cut off (the truncation failed too) stays as dead bytes.
  void ReclaimFailedWrite(WriteMark from, uint64_t bytes) TIERKV_REQUIRES(write_mu_) TIERKV_EXCLUDES(mu_);
  Status EvictForLocked(uint64_t bytes) TIERKV_REQUIRES(mu_);
  // Evicts the least valuable leaf chunks until live bytes are at most
  // `live_target`; ResourceExhausted when nothing evictable is left first.
  Status EvictUntilLocked(uint64_t live_target) TIERKV_REQUIRES(mu_);
  // For a full disk: evicts every chunk (with its descendants) and
  // reordered layout that has a record in the segment holding the fewest
  // live bytes, so that compaction deletes it without writing. False when
  // no segment holds live records.
  bool EmptySegmentLocked() TIERKV_REQUIRES(mu_);
  void DropLocked(uint32_t chunk, bool corrupt) TIERKV_REQUIRES(mu_);
  // Drops a chunk whose record failed verification, if it is still the one read.
  void DropCorruptLocked(uint32_t chunk, uint64_t prefix_hash) TIERKV_REQUIRES(mu_);
  // Drops a chunk's probe copy (every layer's; a no-op without one): the
  // chunk stays, its K records still hold the keys, the copy's bytes are dead.
  void DropProbeCopyLocked(uint32_t chunk) TIERKV_REQUIRES(mu_);
  struct Published {
    size_t chunks = 0;
    uint64_t bytes = 0;
  };
  // Gives each newly inserted chunk its records' locations (from `where_of`,
  // by prefix hash) and accounts its bytes as live.
  Result<Published> PublishLocked(const std::vector<uint32_t>& created,
                                  const std::function<const Placed*(uint64_t)>& where_of)
      TIERKV_REQUIRES(mu_);
  uint64_t ChunkBytesLocked(uint32_t chunk) const TIERKV_REQUIRES(mu_);
  void DropRunLocked(uint32_t chunk) TIERKV_REQUIRES(mu_);  // no-op if the chunk is not reordered
  // A chunk (whose prefix hash was `prefix_hash`) left the index.
  void ForgetChunkLocked(uint32_t chunk, uint64_t prefix_hash) TIERKV_REQUIRES(mu_);
  Status WriteManifest() TIERKV_REQUIRES(write_mu_) TIERKV_EXCLUDES(mu_);
  // A live chunk and an installed run as the manifest keeps them; the
  // segments their records use are added to *used.
  ManifestChunk ManifestChunkLocked(uint32_t id, std::set<uint32_t>* used) const TIERKV_REQUIRES(mu_);
  ManifestRun ManifestRunOf(const Run& run, std::set<uint32_t>* used) const;

  // ---- put.cc: Put's steps
  struct PutPlan {
    size_t start = 0, end = 0;  // the prompt's tokens [start, end) are written
    uint64_t parent_hash = 0;   // of the chunk before `start` (the namespace when start is 0)
    uint64_t ns = 0;            // the prompt's namespace (KvInput::cache_namespace)
  };
  struct Written {
    uint64_t prefix_hash = 0;
    Placed placed;
    std::vector<KnownHeader> headers;  // of its K/V records, per layer (for known_headers_)
  };
  // One try of Put (plan, write, sync, publish, ordered copies); a failed
  // write is cut off again (ReclaimFailedWrite). *need: the bytes of the
  // chunks it planned to write.
  Result<PutResult> PutOnce(std::span<const int32_t> tokens, const KvInput& kv, uint64_t* need)
      TIERKV_REQUIRES(write_mu_) TIERKV_EXCLUDES(mu_);
  // After a Put met a full file system: the least valuable chunks evicted
  // for `need` bytes (whatever the budget says), then the dead bytes
  // compacted away, so that the space exists on disk for the second try.
  void MakeRoomAfterNoSpace(uint64_t need) TIERKV_REQUIRES(write_mu_) TIERKV_EXCLUDES(mu_);
  // Touches the prompt's stored prefix, evicts for the new chunks, and says
  // what is written (the longest prefix that fits when the budget is short).
  Result<PutPlan> PlanPutLocked(std::span<const int32_t> tokens, size_t first_row, uint64_t ns)
      TIERKV_REQUIRES(mu_);
  // Tokens from `start` on (below `end`) whose records fit the budget's room.
  size_t FitLocked(size_t start, size_t end) const TIERKV_REQUIRES(mu_);
  // Appends the records of tokens [plan.start, plan.end): batches of chunks,
  // each chunk's K/V layers back to back, then the batch's probe records
  // layer by layer. Not yet durable.
  Status WriteChunks(std::span<const int32_t> tokens, const KvInput& kv, const PutPlan& plan,
                     std::vector<Written>* written, uint64_t* bytes) TIERKV_REQUIRES(write_mu_);
  // One batch's K/V records (chunks of `ns` tokens from `p`); `*hash` is the
  // chain hash so far.
  Status WriteKeyValues(std::span<const int32_t> tokens, const KvInput& kv, size_t p,
                        const std::vector<uint32_t>& ns, uint64_t* hash, std::vector<uint64_t>* parents,
                        std::vector<Written>* written, uint64_t* bytes) TIERKV_REQUIRES(write_mu_);
  Status WriteProbes(std::span<const int32_t> tokens, const KvInput& kv, size_t p,
                     const std::vector<uint32_t>& ns, const std::vector<uint64_t>& parents,
                     Written* batch, uint64_t* bytes) TIERKV_REQUIRES(write_mu_);
  // put_order.cc: the new chunks' rows written once more in the order of
  // the importance the caller gave (KvInput::importance), as reordered runs
  // of at most `max_run_chunks` chunks; not yet durable. Installed after
  // publishing (the runs' chunk ids exist then), with the importance as
  // each chunk's first report.
  struct PutRun {
    std::shared_ptr<Run> run;
    std::vector<KnownHeader> headers;
  };
  Status WritePutRuns(const KvInput& kv, const PutPlan& plan, const std::vector<Written>& written,
                      std::vector<PutRun>* runs, uint64_t* bytes) TIERKV_REQUIRES(write_mu_);
  // After the chunks are published: their ordered copies written, synced
  // and installed (a failure is logged and costs only the copies). Returns
  // the bytes written.
  uint64_t WriteOrderedCopies(std::span<const int32_t> tokens, const KvInput& kv, const PutPlan& plan,
                              const std::vector<Written>& written) TIERKV_REQUIRES(write_mu_)
      TIERKV_EXCLUDES(mu_);
  // Returns the bytes of runs that could not be installed (dead).
  uint64_t InstallPutRunsLocked(std::span<const int32_t> tokens, const KvInput& kv, const PutPlan& plan,
                                std::vector<PutRun>& runs) TIERKV_REQUIRES(mu_);
  // Encodes one record of the prompt into *record (its sequence number is the next).
  RecordHeader EncodeChunkRecord(RecordKind kind, uint16_t layer, std::span<const int32_t> tokens,
                                 size_t p, uint32_t n, uint64_t parent, uint64_t prefix_hash,
                                 const std::string& payload, std::string* record) TIERKV_REQUIRES(write_mu_);
  // Counts a selective read (rows or probe keys): records, pages, bytes,
  // and the records that failed.
  void CountRead(const RowReadStats& st, uint64_t corrupt, uint64_t errors) const
      TIERKV_EXCLUDES(stats_mu_);
  // Adds to the store's counters.
  template <typename F>
  void Count(F&& add) const TIERKV_EXCLUDES(stats_mu_) {
    MutexLock s(&stats_mu_);
    add(stats_);
  }

  const StoreOptions opts_;
  FileSystem* const fs_;
  const RecordChecker checker_;
  std::unique_ptr<FileLock> lock_;  // the directory's LOCK, while open for writing
  // Set once the directory was found removed or replaced: never cleared, so
  // the store never writes by its path again (a second store may own it).
  std::atomic<bool> directory_lost_{false};

  Mutex write_mu_;
  std::string directory_lost_why_ TIERKV_GUARDED_BY(write_mu_);  // the check's message
  SegmentWriter writer_ TIERKV_GUARDED_BY(write_mu_);
  uint64_t sequence_ TIERKV_GUARDED_BY(write_mu_) = 0;  // of the last record written

  mutable Mutex mu_ TIERKV_ACQUIRED_AFTER(write_mu_);
  index::RadixTree tree_ TIERKV_GUARDED_BY(mu_);
  ChunkTable table_ TIERKV_GUARDED_BY(mu_);
  RunTable runs_ TIERKV_GUARDED_BY(mu_);  // reordered runs, by each of their chunks
  // Importance reports per chunk for reordering: sums per layer and row.
  struct Heat {
    uint64_t prefix_hash = 0;
    std::vector<float> sum;         // layer-major, chunk_tokens per layer
    std::vector<uint32_t> reports;  // per layer
    uint64_t last = 0;
    bool fresh = false;             // reported since the last reordering
  };
  std::unordered_map<uint32_t, Heat> heat_ TIERKV_GUARDED_BY(mu_);
  uint64_t heat_clock_ TIERKV_GUARDED_BY(mu_) = 0;
  uint64_t live_bytes_ TIERKV_GUARDED_BY(mu_) = 0;
  uint64_t dead_bytes_ TIERKV_GUARDED_BY(mu_) = 0;
  // By segment number; shared so that a read in flight keeps its file open
  // while compaction deletes the segment.
  std::vector<std::shared_ptr<RandomAccessFile>> readers_ TIERKV_GUARDED_BY(mu_);
  bool dirty_ TIERKV_GUARDED_BY(mu_) = false;
  // K/V records' identity and page checksums, so that row reads skip the
  // header block (header_cache.h); its own leaf lock.
  HeaderCache known_headers_;  // written since the last manifest
  // What reads cost on this disk (io_model.h); set once by Init, then read only.
  IoCostModel io_model_;
  // The largest gap (blocks) a row read reads through (merge_read_gaps).
  uint32_t MergeGap() const { return opts_.disk.merge_read_gaps ? io_model_.MergeGapBlocks() : 0; }
  std::atomic<size_t> segment_count_{0};

  // The main backend and the registered staging arena for whole-record reads.
  mutable Mutex io_mu_ TIERKV_ACQUIRED_AFTER(mu_);
  std::unique_ptr<IoBackend> io_ TIERKV_PT_GUARDED_BY(io_mu_);
  AlignedBuffer arena_ TIERKV_GUARDED_BY(io_mu_);
  uint64_t arena_bytes_ = 0;  // set once by Init
  // Backends for reads into their own buffers (selected rows, probe keys),
  // one user each at a time: a request's demand read never waits behind
  // another thread's batch.
  Mutex side_mu_;
  CondVar side_cv_;
  std::vector<std::unique_ptr<IoBackend>> side_io_;                 // all of them; set by Init
  std::vector<IoBackend*> side_free_ TIERKV_GUARDED_BY(side_mu_);  // not in use

  mutable Mutex stats_mu_;
  mutable StoreStats stats_ TIERKV_GUARDED_BY(stats_mu_);
};

}  // namespace tierkv::store

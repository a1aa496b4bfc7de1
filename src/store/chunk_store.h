// The disk tier: every stored prefix's K/V in append-only segment files of
// checksummed chunk records, found through the radix tree, recovered from the
// records themselves after a crash.
//
// Layout of a cache directory:
//   STORE             identity (format version, model fingerprint, geometry); written once
//   seg-000001.tkv …  append-only segments of 4 KiB-aligned records (store/format.h)
//
// Durability: Put appends the new chunks' records, syncs the segment (and the
// directory when it created a segment), and only then publishes the chunks
// in the index. A chunk a reader can see is therefore on disk; a crash loses
// at most Puts that had not returned. Open() rebuilds the index by reading
// every segment and indexing the records whose header and pages verify and
// whose whole prefix chain is present; anything else (torn tail, orphan,
// foreign record) is skipped and counted.
//
// Reads verify the header checksum, the record's identity (fingerprint,
// kind, layer, prefix hash, token span) and every page checksum. A failure is
// Corruption: the chunk and everything that depends on it leave the index, a
// counter rises, and the caller recomputes. A wrong KV is never returned.
//
// Thread safety: all methods are thread-safe. Put calls are serialised with
// one another; lookups and reads never wait on a Put's I/O (the index lock is
// held only around metadata changes, never across a file-system call). The
// internals and their locks: store_impl.h.
#pragma once

#include <functional>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "index/mapping_list.h"
#include "index/radix_tree.h"
#include "store/format.h"
#include "store/io_model.h"
#include "store/io_backend.h"
#include "tierkv/filesystem.h"
#include "tierkv/status.h"
#include "tierkv/store.h"

namespace tierkv::store {

struct StoreOptions {
  std::string dir;
  FileSystem* fs = nullptr;  // nullptr: FileSystem::Default()
  // Files the store's owner keeps in the directory (the engine's car
  // profile), with their ".tmp" siblings: tolerated, never touched.
  std::vector<std::string> owner_files;
  // Called with a chunk's prefix hash when it leaves the index (evicted,
  // dropped as corrupt or with a corrupt ancestor), so that caches above the
  // store forget it before the same prefix is stored again. Runs under the
  // store's lock: it must not call the store.
  std::function<void(uint64_t prefix_hash)> on_chunk_removed;
  // The namespace: a store refuses to open a directory written for another one.
  uint64_t fingerprint = 0;
  std::string model_description;  // human-readable, kept in STORE
  uint32_t chunk_tokens = 64;
  uint16_t layers = 1;
  uint32_t row_bytes = 0;  // bytes of one token's K (all KV heads) = of its V
  // Bytes of one token's probe-head keys: the first probe_bytes of its K row
  // (the probe heads are a layer's first KV heads). Non-zero: every chunk's
  // probe keys are stored once more per layer, in kProbeKeys records laid
  // out so that the probe keys of consecutive chunks of one layer are one
  // contiguous read. 0: no probe records (ReadProbeKeys slices K records).
  uint32_t probe_bytes = 0;
  KvDtype dtype = KvDtype::kF16;
  // Bytes of records the disk tier may hold; 0 means unlimited. When full,
  // the least valuable leaf chunks are evicted (whole token chunks): value is
  // the chunk's access count decayed with this half-life (in accesses to the
  // store), so both how often and how recently a chunk was used count.
  // 0: least recently used.
  uint64_t disk_budget_bytes = 0;
  uint32_t eviction_half_life = 4096;
  // Dead bytes (records of evicted, dropped or superseded chunks, copies
  // that were not installed) the segments may hold. Past it, Put first
  // compacts the segments with the largest dead share, one at a time, until
  // at most half of it is left. 0: no limit (dead bytes wait for Compact()).
  // SetDiskBudget sets both budgets from one bound on the segment files.
  uint64_t max_dead_bytes = 0;
  uint64_t segment_bytes = kDefaultSegmentBytes;
  uint32_t queue_depth = 32;
  // Staging memory for whole-record reads, registered with io_uring (fixed
  // buffers: no page pinning per read). Bigger batches go through it in
  // slices. Registered memory counts against RLIMIT_MEMLOCK (often 8 MiB).
  uint64_t io_arena_bytes = 4ull << 20;
  // Concurrent readers of selected rows and probe keys: each has its own
  // backend (a ring, or pread threads), so threads' batches run side by
  // side on the device. At least 1.
  uint32_t side_readers = 2;
  DiskOptions disk;  // backend, O_DIRECT, the planner's gaps and cost model
  // Inspect only: never create or write anything; Put fails.
  bool read_only = false;
  // Write the manifest when the store is destroyed (off: tests that model a
  // crash without killing the process).
  bool checkpoint_on_close = true;
  // How many chunks' importance reports the reordering job keeps (the least
  // recently reported are forgotten first). 4 bytes per row and layer each.
  uint32_t reorder_tracked_chunks = 4096;
};

// Bounds the bytes of o's segment files (live and dead records) by `bytes`
// (0: unlimited): live records get 3/4 of it (disk_budget_bytes), dead ones
// awaiting compaction the rest (max_dead_bytes), and segments are at most
// 1/16 of it (at least 1 MiB). Why a quarter dead: Put compacts when dead
// bytes pass it, and with a quarter of the files dead the segments it
// picks (the most dead first) are at least a quarter dead, so compaction
// moves at most 3 live bytes per byte it frees; a segment compacted at a
// time adds at most its live bytes while it runs.
void SetDiskBudget(StoreOptions* o, uint64_t bytes);

// The options a cache directory was written with, from its STORE file (for
// tools that open a store without a model: inspect). NotFound: not a cache
// directory; InvalidArgument: a damaged identity file, naming the field.
Result<StoreOptions> ReadStoreIdentity(FileSystem* fs, const std::string& dir);

// K and V rows of a prompt, per layer: k[l] and v[l] hold rows
// [first_row, tokens.size()) of row_bytes each, token-major. A caller that
// has only the rows after the stored prefix (it loaded some of it) sets
// first_row; Put then never writes a chunk that starts before it (if
// eviction took part of the stored prefix meanwhile, it stores nothing).
//
// importance (optional; empty or one span per layer of the rows' count):
// how much each row [first_row, tokens.size()) mattered to the request that
// computed it (its attention column sums). Given, Put also writes the new
// chunks' rows per layer in descending importance as reordered runs
// (kReorderedKeyValue, as Reorder does later from requests' reports), so
// that a store is packed by importance from its first write and a
// selective read of the important rows touches few pages. Those copies
// cost as many bytes again as the chunks' own records; they are written
// after the chunks are durable and published, and failing to write them (a
// full disk) fails nothing but them.
struct KvInput {
  std::vector<std::span<const char>> k, v;
  size_t first_row = 0;
  // Whose prefixes these are (a tenant's; 0: shared): stored and found only
  // under it (index/radix_tree.h). Its first chunk's parent hash is it.
  uint64_t cache_namespace = 0;
  std::vector<std::span<const float>> importance;
};

struct PutResult {
  size_t stored_tokens = 0;   // tokens the index now covers for this prompt
  size_t new_chunks = 0;      // token chunks written by this call
  uint64_t bytes_written = 0;
};

// One layer of one chunk to read. Outputs are row_bytes * tokens each.
// A chunk is named by its id and its prefix hash, both from Lookup: ids are
// reused after eviction, so a read whose chunk was evicted (and whose id now
// names another chunk) since the lookup is NotFound, never another chunk's KV.
struct ChunkRead {
  uint32_t chunk = index::kNoChunk;
  uint64_t prefix_hash = 0;
  uint16_t layer = 0;
  char* k = nullptr;  // may be null: values only
  char* v = nullptr;  // may be null: keys only
  bool prefetch = false;
  Status status;      // out: OK, Corruption (a miss), IOError, NotFound
};

// Some rows of one layer of one chunk (a selective load). `rows` are row
// indices within the chunk, ascending, each < the chunk's tokens; the outputs
// receive rows.size() * row_bytes each, in the order of `rows`. Only the
// header and the 4 KiB pages holding those rows are read and verified; if the
// chunk belongs to a reordered run, they come from its reordered records.
struct RowRead {
  uint32_t chunk = index::kNoChunk;
  uint64_t prefix_hash = 0;
  uint16_t layer = 0;
  std::span<const uint32_t> rows;
  char* k = nullptr;  // may be null: values only
  char* v = nullptr;  // may be null: keys only
  bool prefetch = false;
  Status status;      // out: OK, Corruption (a miss), IOError, NotFound, InvalidArgument
};

// The probe-head keys of one layer of one chunk: tokens * probe_bytes bytes
// into `out`, token-major.
struct ProbeRead {
  uint32_t chunk = index::kNoChunk;
  uint64_t prefix_hash = 0;
  uint16_t layer = 0;
  char* out = nullptr;
  bool prefetch = false;
  Status status;              // out
  bool from_probe_record = false;  // out: read from the probe copy (not sliced from K)
};

// What one ReadRows call read from disk.
struct RowReadStats {
  uint64_t records = 0;            // distinct records touched (the paper's "chunks read")
  uint64_t reordered_records = 0;  // of them, reordered copies
  uint64_t pages = 0;              // payload pages read (plus one header block per record)
  uint64_t bytes = 0;              // bytes read
  uint64_t ios = 0;                // read requests issued (adjacent blocks merged)
  void Add(const RowReadStats& o) {
    records += o.records;
    reordered_records += o.reordered_records;
    pages += o.pages;
    bytes += o.bytes;
    ios += o.ios;
  }
};

struct ReorderOptions {
  uint32_t max_runs = 16;         // runs rewritten per call (hottest first)
  uint32_t max_run_chunks = 64;   // chunks of one node reordered together
};

struct ReorderResult {
  uint32_t runs = 0;             // runs rewritten and swapped in
  uint32_t discarded = 0;        // rewritten, but a chunk left meanwhile (the copy is dead)
  uint64_t bytes_written = 0;
};


struct CompactResult {
  uint32_t segments = 0;       // segments rewritten and deleted
  uint64_t records_moved = 0;  // live records copied to the active segment
  uint64_t bytes_reclaimed = 0;
};

struct LookupResult {
  size_t matched_tokens = 0;
  std::vector<uint32_t> chunks;  // token order; see index::Match
  std::vector<uint32_t> chunk_tokens;  // tokens of each chunk
  std::vector<uint64_t> prefix_hashes;  // identity of each chunk (for ChunkRead)
};

class ChunkStore {
 public:
  // Opens or creates the store in options.dir and recovers its index.
  // InvalidArgument: bad geometry, a budget below one token chunk, a directory
  // of another model or with files the store did not write, a symlinked
  // segment. IOError: the directory cannot be created or written.
  static Result<std::unique_ptr<ChunkStore>> Open(StoreOptions options);
  ~ChunkStore();

  ChunkStore(const ChunkStore&) = delete;
  ChunkStore& operator=(const ChunkStore&) = delete;

  // Stores the K/V of every token of `tokens` that no stored prefix covers.
  // Returns once the new records are durable and visible. If the budget
  // cannot hold the whole prompt even after evicting, stores the longest
  // prefix that fits (stored_tokens says how much).
  // On an I/O error nothing new becomes visible, and the records this call
  // appended are cut off their segment again (a segment it created is
  // deleted), so failed writes leave no bytes behind. A full file system
  // (ResourceExhausted: ENOSPC, EDQUOT) is answered by evicting the least
  // valuable chunks for the prompt's bytes, compacting the dead bytes away
  // and trying once more; failing again, the error is returned and counted
  // (StoreStats::put_failures): a miss, and the next Put tries afresh.
  // IOError, writing nothing, once the directory was removed or replaced
  // (CheckDirectory).
  Result<PutResult> Put(std::span<const int32_t> tokens, const KvInput& kv);

  // The longest stored prefix of `tokens` in namespace `ns` (KvInput::cache_namespace).
  LookupResult Lookup(std::span<const int32_t> tokens, uint64_t ns = 0);

  // Reads and verifies each requested chunk layer (one batch through the
  // IoBackend). Per-read statuses; the call itself fails only on misuse.
  Status Read(std::span<ChunkRead> reads, RowReadStats* stats = nullptr);

  // Reads some rows of chunk layers (selective loading; see RowRead). Like
  // Read, per-read statuses. A reordered copy that fails verification is
  // dropped and its rows are read from the chunks' own records instead.
  Status ReadRows(std::span<RowRead> reads, RowReadStats* stats = nullptr);

  // Reads the probe-head keys of chunk layers (identification). Adjacent
  // probe records are fetched with one read. Chunks without a probe copy
  // (probe_bytes 0, or a copy that was lost or fails verification) get them
  // sliced from their K records instead; a K record failing verification is
  // a Corruption miss as in Read.
  Status ReadProbeKeys(std::span<ProbeRead> reads, RowReadStats* stats = nullptr);

  // Reports per-row importance of a looked-up prefix at `layer` (one score
  // per matched token, token order; e.g. attention column sums). Feeds the
  // reordering job's per-row averages. Chunks evicted since the lookup are
  // ignored.
  void ReportImportance(const LookupResult& prefix, uint16_t layer,
                        std::span<const float> importance);

  // KV reordering (IMPRESS 4.4.1), one round: for each run of a node's
  // chunks with new importance reports, writes the run's rows per layer in
  // descending average importance as extra records with a mapping list, and
  // swaps the layout in under the index lock. Readers never wait on the I/O
  // and see either the old or the new layout; the chunks' own records stay
  // the source of truth. A later split of the node keeps the layout (it is
  // keyed by chunks, not by node); eviction or loss of any chunk of the run
  // drops it. Layouts are in the manifest: a clean restart brings them back;
  // after a crash (records newer than the manifest) they are dead bytes
  // until the next round rewrites them.
  Result<ReorderResult> Reorder(const ReorderOptions& options = {});

  // Drops every chunk (a cache flush) and checkpoints: no lookup finds one
  // again, in this process or after a restart; reads already planned fail
  // their checks (a miss). Their bytes are dead until compaction. Returns
  // how many chunks were dropped. InvalidArgument when read-only.
  Result<uint64_t> DropAll();

  // Writes the manifest (a snapshot of the index) after sealing the active
  // segment, so that the next Open reads it plus the segments written after
  // it. Done by the destructor too. InvalidArgument when read-only.
  Status Checkpoint();

  // Reclaims dead bytes: every sealed segment whose dead share is at least
  // `min_dead_fraction` has its live records (verified) copied to the active
  // segment; once the copies are durable the index points at them, a new
  // manifest is written, and the old segments are deleted. Readers are
  // never blocked on its I/O and never see a half-moved chunk: a chunk's
  // location switches under the index lock, and a read that started on the
  // old segment finishes on it (the file stays open until no read uses it).
  // A crash at any step leaves either the old or the new copy findable.
  Result<CompactResult> Compact(double min_dead_fraction = 0.5);

  // Reads every record of every live chunk (K/V and probe copies) and
  // checks it. With `repair`, damaged chunks (and their descendants) leave
  // the index, damaged probe copies are dropped, and a manifest makes that
  // durable; InvalidArgument when read-only.
  Result<VerifyReport> Verify(bool repair);

  // OK while the store's directory is still the one it opened (its LOCK
  // file still at its path). Once it is not (removed, moved away, replaced
  // by a new directory, its LOCK deleted), the store stops writing for good:
  // this, and every later Put, Reorder, Compact and Checkpoint, returns
  // IOError "cache directory D was removed or replaced; storing stopped";
  // StoreStats::directory_lost is set and one ERROR line logged. Nothing is
  // written by path after that, so a second store may own a new directory at
  // the path. Reads of what the index holds go on from the open segment
  // files. Put, a segment roll and the manifest check it themselves; the
  // engine's maintenance calls it so that an idle server notices too.
  // Serialised with Put. Read-only stores: always OK.
  Status CheckDirectory();

  StoreStats stats() const;
  const StoreOptions& options() const;
  // The read planner's cost model and where it came from (calibrate_io).
  const IoCostModel& io_model() const;
  uint64_t record_bytes(uint32_t tokens) const;  // bytes of one chunk layer on disk

  // The importance order of a chunk's rows, per layer: order[l][i] is the
  // chunk row (0-based) ranked i-th, as its reordered run packs them (at
  // store, or by a reordering round), else by the requests' importance
  // reports (an empty list for a layer without any). Empty when there is
  // neither, or the chunk is no longer the one `prefix_hash` names.
  std::vector<std::vector<uint16_t>> RowOrder(uint32_t chunk, uint64_t prefix_hash) const;
  uint64_t probe_record_bytes(uint32_t tokens) const;  // of its probe copy (0 without)

  // Test and inspection hooks: where chunk `chunk`'s layer lives.
  struct Location {
    uint32_t segment = 0;  // 0: none
    uint32_t block = 0;    // offset / kBlockSize
  };
  // Bytes of the store's own per-chunk tables (beside the radix tree;
  // store/chunk_table.h).
  static size_t TableBytesPerChunk();
  Location TEST_location(uint32_t chunk, uint16_t layer) const;
  // Bytes of live records (chunks, probe copies, reordered runs) per
  // segment number; a segment missing here holds none (inspect shows it;
  // the next writable open deletes it).
  std::vector<std::pair<uint32_t, uint64_t>> LiveBytesBySegment() const;
  // Where record `record` of layer `layer` of the reordered run holding
  // `chunk` is (segment 0: the chunk is not reordered).
  Location TEST_run_location(uint32_t chunk, uint16_t layer, uint32_t record) const;
  std::string SegmentPath(uint32_t segment) const;

  // The internals (store_impl.h); opaque to callers.
  struct Impl;

 private:
  explicit ChunkStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tierkv::store

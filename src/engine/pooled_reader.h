// Reads of a stored prefix's K/V through the device and host pools: what a
// pool holds is copied from it, the rest is read from the store (verified
// there) and admitted. Thread-safe (the pools and the store are); called by
// the compute thread (demand reads) and the load thread (reads ahead).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "cache/tiered_cache.h"
#include "engine/io_counts.h"
#include "engine/pool_entries.h"
#include "store/chunk_store.h"
#include "tierkv/status.h"

namespace tierkv::engine {

struct ReaderGeometry {
  uint32_t chunk_tokens = 64;
  uint32_t row_bytes = 0;    // one token's K (all KV heads), fp16
  uint32_t probe_bytes = 0;  // one token's probe-head keys
};

// Who reads: the layer that needs the rows now; the load thread, ahead, for
// rows the request will use (all keys at its start); or spec's read ahead,
// which may turn out unused (it looks at the pools but neither counts an
// access nor changes them).
enum class ReadFor { kDemand, kAhead, kSpeculation };

// Rows another read already has (spec's read ahead): `rows` ascending, their
// K and V at k/v->data() + i * row_bytes, to be looked at only after `ready`
// returned OK (another thread fills them).
struct Supplied {
  std::span<const int32_t> rows;
  const std::string* k = nullptr;
  const std::string* v = nullptr;
  std::function<Status()> ready;
};

class PooledReader {
 public:
  PooledReader(store::ChunkStore* store, cache::TieredCache* pools, ReaderGeometry g)
      : store_(store), pools_(pools), g_(g) {}

  // Rows [0, R) of `layer`, K and V (R x row_bytes each, token-major), from
  // whole-record pool entries or whole records (as-like). A chunk that fails
  // (corrupt, evicted, EIO) fails the read: the request runs again with less
  // reuse (the store has dropped a corrupt chunk already).
  Status ReadWholeLayer(const store::LookupResult& m, size_t R, int layer, std::string* k,
                        std::string* v, IoCounts* io);

  // Rows `rows` (ascending, below R) of `layer`, K and/or V, into k/v
  // (|rows| x row_bytes each, in that order): from the row entries of the
  // pools, from `supplied`, and only the rest's pages from disk. Demand and
  // ahead reads grow the pools' entries by what they read and keep all of
  // `supplied` (its unused rows on the host at most).
  Status ReadSelected(const store::LookupResult& m, int layer, std::span<const int32_t> rows,
                      char* k, char* v, ReadFor who, IoCounts* io,
                      const Supplied* supplied = nullptr);

  // Of `rows` (ascending) of `layer`, those whose K or V no pool entry
  // holds now (a look, not an access): what a read ahead would have to read.
  std::vector<int32_t> NotPooled(const store::LookupResult& m, int layer,
                                 std::span<const int32_t> rows) const;

  // The probe heads' keys of R's chunks at `layer`: R x probe_bytes.
  Status ReadProbes(const store::LookupResult& m, size_t R, int layer, std::string* keys,
                    IoCounts* io);

  const ReaderGeometry& geometry() const { return g_; }

 private:
  struct Group;
  std::vector<Group> GroupByChunk(std::span<const int32_t> rows) const;
  // Looks the group up in the pools and splits what it lacks into rows
  // `supplied` has and rows to read from disk (returned).
  std::vector<uint16_t> PlanGroup(const store::LookupResult& m, int layer, bool k, bool v,
                                  ReadFor who, const Supplied* supplied, size_t* si, Group* g,
                                  IoCounts* io);
  // Copies the group's rows into k/v and, for a demand or ahead read, grows
  // its pool entry by what was missing and by the chunk's `supplied` rows.
  void FinishGroup(Group& g, const std::vector<uint32_t>* disk_rows, const Supplied* supplied,
                   char* k, char* v, bool admit);
  // `supplied`'s rows of chunks no group uses join their chunks' entries
  // (FinishGroup of a group without rows: placed on the host at most).
  void KeepReadAhead(const store::LookupResult& m, int layer, const std::vector<Group>& groups,
                     const Supplied& supplied);
  // The row entry a pin holds (empty on a miss).
  RowEntryView EntryOf(const cache::Pin& pin) const;
  // The rows of `supplied` (null: none) in chunk `chunk`.
  std::span<const int32_t> SuppliedOf(const Supplied* supplied, size_t chunk) const;

  store::ChunkStore* store_;
  cache::TieredCache* pools_;
  ReaderGeometry g_;
};

}  // namespace tierkv::engine

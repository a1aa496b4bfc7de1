// What the store knows of its records' headers without reading them: the
// identity and page checksums of each K/V record, kept in memory from the
// moment the store writes the record (or first reads and verifies its
// header). A selective read of some rows then reads only their pages and
// verifies each against the checksum kept here, instead of reading the 4
// KiB header block first: at a quarter of a 64-token record's rows the
// header is a fifth of what is read. The identity kept here (from a header
// the store wrote or verified) is matched against what the read expects;
// any difference means the header is read and checked as before.
//
// Entries are keyed by location; a location holds one record for the
// life of a store (segments are append-only and never renumbered).
// About 150 bytes per record (0.2% of a 64-token record of the default
// model). Thread-safe: its own mutex, a leaf (nothing is called under it).
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "store/format.h"
#include "store/record_check.h"
#include "tierkv/mutex.h"

namespace tierkv::store {

struct KnownHeader {
  RecordKind kind = RecordKind::kKeyValue;
  uint16_t layer = 0;
  uint64_t prefix_hash = 0;
  uint32_t first_token = 0, tokens = 0;
  std::vector<uint64_t> page_checksums;
  // A header's identity and checksums.
  static KnownHeader Of(const RecordHeader& h);
  // Whether this is the record `e` expects (its identity; a reordered
  // record's rows were written from its run's mapping list).
  bool Matches(const Expect& e) const;
};

class HeaderCache {
 public:
  void Put(Location at, KnownHeader h);
  // The known header at `at`, if it is the record `e` expects; else null.
  std::shared_ptr<const KnownHeader> Find(Location at, const Expect& e) const;
  void Erase(Location at);
  void EraseSegment(uint32_t segment);
  size_t size() const;

 private:
  static uint64_t Key(Location at) { return uint64_t{at.segment} << 32 | at.block; }
  mutable Mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<const KnownHeader>> known_ TIERKV_GUARDED_BY(mu_);
};

}  // namespace tierkv::store

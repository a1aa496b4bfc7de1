// What reads cost a request: disk bytes and records, where each chunk layer
// was found, and the bytes copied out of each pool.
#pragma once

#include <cstdint>

#include "cache/tiered_cache.h"
#include "tierkv/engine.h"

namespace tierkv::engine {

struct IoCounts {
  uint64_t bytes = 0, records = 0;                          // from the disk
  uint64_t device_hits = 0, host_hits = 0, disk_reads = 0;  // chunk-layer accesses by tier
  uint64_t device_bytes = 0, host_bytes = 0;                // copied out of each pool

  // `n` bytes copied out of a pool entry found in tier `t`.
  void FromPool(cache::Tier t, uint64_t n) {
    (t == cache::Tier::kDevice ? device_bytes : host_bytes) += n;
  }
  // One access that found its entry in tier `t` (device or host).
  void Hit(cache::Tier t) { t == cache::Tier::kDevice ? ++device_hits : ++host_hits; }
  void Add(const IoCounts& o) {
    bytes += o.bytes;
    records += o.records;
    device_hits += o.device_hits;
    host_hits += o.host_hits;
    disk_reads += o.disk_reads;
    device_bytes += o.device_bytes;
    host_bytes += o.host_bytes;
  }
  // Copies the counts into a request's statistics.
  void FillStats(RequestStats* st) const {
    st->disk_bytes_read = bytes;
    st->disk_chunks_read = records;
    st->device_hits = device_hits;
    st->host_hits = host_hits;
    st->disk_reads = disk_reads;
    st->device_bytes_read = device_bytes;
    st->host_bytes_read = host_bytes;
  }
};

}  // namespace tierkv::engine

// The device and host pools above the disk tier.
//
// Both pools are bounded in bytes and exclusive of each other (a chunk is in
// at most one); the disk tier (store::ChunkStore) holds every chunk, so a
// chunk leaving the host pool is dropped, never written. A chunk is any unit
// the caller names with a 64-bit key (the engine uses one layer of one token
// chunk, keyed by prefix hash and layer).
//
// Placement (IMPRESS 4.4.2, for every policy; the policy only sets the
// priorities, cache/policy.h):
//   device hit  stays on the device.
//   host hit    promoted when its priority beats what it would displace on
//               the device (the device's lowest chunks, lowest first, until
//               it fits); the displaced chunks are demoted to the host.
//   miss        the caller reads the disk and calls Admit: the chunk goes to
//               the device under the same rule, else to the host under the
//               same rule against the host's lowest, else stays on disk.
// The two ordered sets (priority, key) per pool are the paper's two min-heaps
// with decrease-key: begin() is the lowest chunk.
//
// Pinning: Access and Admit return a Pin; while any Pin of a chunk lives,
// the chunk is neither demoted nor dropped (eviction skips it, it never
// waits). Data is shared and immutable: a promotion copies it into a new
// device buffer, and a Pin taken before keeps the buffer it was given.
//
// Asynchronous offload (CaR III-D, on by default for `car`): a background
// "offload" thread demotes the device's lowest unpinned chunks to the host
// whenever the device is fuller than `offload_watermark`, so that admissions
// rarely have to evict on the request's path.
//
// Thread safety: all methods are thread-safe (one mutex; no I/O under it).
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/policy.h"
#include "tierkv/pool_stats.h"
#include "tierkv/status.h"
#include "tierkv/mutex.h"

namespace tierkv::cache {

enum class Tier : uint8_t { kDevice = 0, kHost = 1, kDisk = 2 };

using Buffer = std::shared_ptr<const std::vector<char>>;

struct CacheOptions {
  uint64_t device_bytes = 0;
  uint64_t host_bytes = 0;
  PolicyKind policy = PolicyKind::kScore;
  PolicyParams params;
  // Background offload above this fraction of device_bytes; < 0: the
  // policy's default (on at 0.9 for car, off otherwise), 0: off.
  double offload_watermark = -1;
};

// CaR's scheduler events (their score rules: +1, +1, -2), and a request
// that leaves the window without starting (cancelled: -1, undoing its entry).
enum class RequestEvent : uint8_t { kEnterWindow, kStart, kFinish, kLeaveWindow };

class TieredCache;

// Keeps a chunk in its tier and its data alive. Move-only.
class Pin {
 public:
  Pin() = default;
  Pin(Pin&& o) noexcept { *this = std::move(o); }
  Pin& operator=(Pin&& o) noexcept;
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;
  ~Pin() { Release(); }

  Tier tier() const { return tier_; }
  // The chunk's bytes, or null on a miss (and for size-only chunks).
  const Buffer& data() const { return data_; }
  void Release();

 private:
  friend class TieredCache;
  TieredCache* cache_ = nullptr;
  uint64_t key_ = 0;
  uint64_t generation_ = 0;
  Tier tier_ = Tier::kDisk;
  Buffer data_;
};

class TieredCache {
 public:
  // InvalidArgument: a watermark outside [0, 1].
  static Result<std::unique_ptr<TieredCache>> Create(const CacheOptions& options);
  ~TieredCache();  // stops the offload thread
  TieredCache(const TieredCache&) = delete;
  TieredCache& operator=(const TieredCache&) = delete;

  // One access by a request that needs `important_rows` of the chunk's
  // `rows`: updates its statistics, promotes a host hit if the policy says
  // so, and pins it. On a miss (tier kDisk) the caller reads the chunk from
  // disk and hands it to Admit.
  Pin Access(uint64_t key, uint32_t important_rows, uint32_t rows);

  // The cached copy, pinned, as it is: no statistics, no promotion (a read
  // ahead that may turn out unused must not count as an access). kDisk and
  // no data when it is not cached.
  Pin Peek(uint64_t key);

  // Places a chunk just read from disk (its statistics were updated by the
  // Access that missed). `bytes` is its size in the pools; `data` may be
  // null (simulations). If another thread admitted it meanwhile, returns
  // that copy. The Pin is in the tier chosen, or kDisk holding `data`.
  Pin Admit(uint64_t key, uint64_t bytes, Buffer data);

  // The chunk's cached bytes changed (a chunk cached in part gained rows):
  // the old copy leaves its pool and the new one is placed as Admit places
  // a miss. Pins taken before keep the old buffer. Statistics are kept.
  // `highest` caps the placement: kHost keeps the new copy off the device
  // (bytes nobody has asked for yet, e.g. rows read ahead for nothing).
  Pin Replace(uint64_t key, uint64_t bytes, Buffer data, Tier highest = Tier::kDevice);

  // The chunk left the disk tier (evicted or corrupt): forget it everywhere.
  // Pins already taken keep their data.
  void Erase(uint64_t key);

  // CaR's score rules, for each chunk of a request.
  void OnRequestEvent(std::span<const uint64_t> keys, RequestEvent event);

  Tier TierOf(uint64_t key) const;
  // TierOf of each key, under one lock (a scheduler's look at a prefix).
  std::vector<Tier> TiersOf(std::span<const uint64_t> keys) const;
  CacheStats stats() const;
  const CacheOptions& options() const { return opts_; }

  // Waits until the offload thread has nothing to do (tests, benchmarks).
  void TEST_WaitForOffload();
  // Checks the invariants: pools within their bounds, each pool's set and
  // byte count equal to its chunks', every chunk in at most one pool.
  Status TEST_Validate() const;

 private:
  // A chunk's place in a pool's order: priority, then recency, then key.
  struct Rank {
    double priority = 0;
    uint64_t last_access = 0;
    uint64_t key = 0;
    bool operator<(const Rank& o) const {
      if (priority != o.priority) return priority < o.priority;
      if (last_access != o.last_access) return last_access < o.last_access;
      return key < o.key;
    }
  };
  struct Entry {
    ChunkStats stats;
    Tier tier = Tier::kDisk;
    uint64_t bytes = 0;
    Rank rank;  // as keyed in its pool's set
    uint32_t pins = 0;
    uint64_t generation = 0;  // tells a Pin of an erased chunk from one of its successor
    Buffer data;
  };
  using Heap = std::set<Rank>;  // begin() is the lowest
  friend class Pin;

  explicit TieredCache(const CacheOptions& options);
  void Unpin(uint64_t key, uint64_t generation);
  Rank RankOf(uint64_t key, const Entry& e) const;
  uint64_t Capacity(Tier t) const { return t == Tier::kDevice ? opts_.device_bytes : opts_.host_bytes; }
  uint64_t& Used(Tier t) TIERKV_REQUIRES(mu_) { return t == Tier::kDevice ? device_used_ : host_used_; }
  Heap& HeapOf(Tier t) TIERKV_REQUIRES(mu_) { return t == Tier::kDevice ? device_ : host_; }
  // Whether `bytes` fit in `t` after dropping chunks of lower priority than
  // `priority` (unpinned, lowest first).
  bool CanFitLocked(Tier t, uint64_t bytes, const Rank& rank) TIERKV_REQUIRES(mu_);
  // Makes room as CanFitLocked found it; device victims go to the host.
  void MakeRoomLocked(Tier t, uint64_t bytes, const Rank& rank) TIERKV_REQUIRES(mu_);
  void InsertLocked(uint64_t key, Entry& e, Tier t, bool copy) TIERKV_REQUIRES(mu_);  // e not in a pool
  void RemoveLocked(uint64_t key, Entry& e) TIERKV_REQUIRES(mu_);  // leaves e on disk
  void DemoteLocked(uint64_t key, Entry& e) TIERKV_REQUIRES(mu_);  // device -> host or disk
  void RekeyLocked(uint64_t key, Entry& e) TIERKV_REQUIRES(mu_);  // priority changed
  Pin MakePinLocked(uint64_t key, Entry& e) TIERKV_REQUIRES(mu_);
  // Places an entry that is in no pool, as a miss.
  Pin PlaceLocked(uint64_t key, Entry& e, uint64_t bytes, Buffer data,
                  Tier highest = Tier::kDevice) TIERKV_REQUIRES(mu_);
  void MaybeWakeOffloaderLocked() TIERKV_REQUIRES(mu_);
  bool OffloadPendingLocked() const TIERKV_REQUIRES(mu_);
  void OffloadLoop();

  const CacheOptions opts_;
  const double watermark_;
  // Set before the offload thread starts (it must not read offloader_,
  // which the constructor is still assigning).
  const bool offload_on_;

  // Guards every entry, both pools' orders and byte counts, the statistics
  // and the offload thread's flags. No I/O and no callback runs under it.
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Entry> entries_ TIERKV_GUARDED_BY(mu_);
  Heap device_ TIERKV_GUARDED_BY(mu_), host_ TIERKV_GUARDED_BY(mu_);
  uint64_t device_used_ TIERKV_GUARDED_BY(mu_) = 0, host_used_ TIERKV_GUARDED_BY(mu_) = 0;
  uint64_t clock_ TIERKV_GUARDED_BY(mu_) = 0;
  CacheStats stats_ TIERKV_GUARDED_BY(mu_);

  CondVar offload_cv_, offload_idle_cv_;
  bool offload_blocked_ TIERKV_GUARDED_BY(mu_) = false;  // the last pass found only pinned chunks
  uint64_t next_generation_ TIERKV_GUARDED_BY(mu_) = 1;
  bool stop_ TIERKV_GUARDED_BY(mu_) = false;
  std::thread offloader_;  // "offload": demotes device -> host above the watermark
};

}  // namespace tierkv::cache

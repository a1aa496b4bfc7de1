#include "cache/tiered_cache.h"

#include <algorithm>

#include "tierkv/logging.h"

namespace tierkv::cache {

double CacheStats::device_hit_ratio() const {
  const uint64_t n = hits[0] + hits[1] + hits[2];
  return n ? static_cast<double>(hits[0]) / static_cast<double>(n) : 0.0;
}

double CacheStats::device_important_hit_ratio() const {
  const uint64_t n = important_rows[0] + important_rows[1] + important_rows[2];
  return n ? static_cast<double>(important_rows[0]) / static_cast<double>(n) : 0.0;
}

Pin& Pin::operator=(Pin&& o) noexcept {
  if (this != &o) {
    Release();
    cache_ = std::exchange(o.cache_, nullptr);
    key_ = o.key_;
    generation_ = o.generation_;
    tier_ = o.tier_;
    data_ = std::move(o.data_);
    o.tier_ = Tier::kDisk;
  }
  return *this;
}

void Pin::Release() {
  if (cache_ != nullptr) cache_->Unpin(key_, generation_);
  cache_ = nullptr;
  data_.reset();
}

Result<std::unique_ptr<TieredCache>> TieredCache::Create(const CacheOptions& options) {
  if (options.offload_watermark > 1.0) {
    return Status::InvalidArgument("offload_watermark must be in [0, 1], got " +
                                   std::to_string(options.offload_watermark));
  }
  if (!(options.params.freq_half_life > 0)) {
    return Status::InvalidArgument("freq_half_life must be positive");
  }
  if (!(options.params.ratio_weight > 0 && options.params.ratio_weight <= 1)) {
    return Status::InvalidArgument("ratio_weight must be in (0, 1]");
  }
  return std::unique_ptr<TieredCache>(new TieredCache(options));
}

namespace {
double DefaultWatermark(const CacheOptions& o) {
  if (o.offload_watermark >= 0) return o.offload_watermark;
  return o.policy == PolicyKind::kCar ? 0.9 : 0.0;
}
}  // namespace

TieredCache::TieredCache(const CacheOptions& options)
    : opts_(options),
      watermark_(DefaultWatermark(options)),
      offload_on_(watermark_ > 0 && options.device_bytes > 0) {
  if (offload_on_) {
    offloader_ = std::thread([this] { OffloadLoop(); });
  }
}

TieredCache::~TieredCache() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  offload_cv_.SignalAll();
  if (offloader_.joinable()) offloader_.join();
}

TieredCache::Rank TieredCache::RankOf(uint64_t key, const Entry& e) const {
  return Rank{Priority(opts_.policy, e.stats, opts_.params), e.stats.last_access, key};
}

bool TieredCache::CanFitLocked(Tier t, uint64_t bytes, const Rank& rank) {
  const uint64_t cap = Capacity(t);
  if (bytes > cap) return false;
  uint64_t free = cap - Used(t);
  if (free >= bytes) return true;
  for (const Rank& r : HeapOf(t)) {
    if (!(r < rank)) return false;  // only lower-ranked chunks are displaced
    const Entry& v = entries_.at(r.key);
    if (v.pins > 0) {
      stats_.pinned_skips++;
      continue;
    }
    free += v.bytes;
    if (free >= bytes) return true;
  }
  return false;
}

void TieredCache::MakeRoomLocked(Tier t, uint64_t bytes, const Rank& rank) {
  uint64_t free = Capacity(t) - Used(t);
  std::vector<uint64_t> victims;
  for (const Rank& r : HeapOf(t)) {
    if (free >= bytes || !(r < rank)) break;
    const Entry& v = entries_.at(r.key);
    if (v.pins > 0) continue;  // counted by CanFitLocked
    free += v.bytes;
    victims.push_back(r.key);
  }
  for (uint64_t k : victims) {
    Entry& v = entries_.at(k);
    if (t == Tier::kDevice) {
      DemoteLocked(k, v);
    } else {
      RemoveLocked(k, v);
      stats_.host_drops++;
    }
  }
}

void TieredCache::InsertLocked(uint64_t key, Entry& e, Tier t, bool copy) {
  e.tier = t;
  e.rank = RankOf(key, e);
  HeapOf(t).insert(e.rank);
  Used(t) += e.bytes;
  if (copy && e.data) {
    // A move between pools copies (on a GPU, the PCIe transfer); Pins taken
    // before keep the old buffer.
    e.data = std::make_shared<const std::vector<char>>(*e.data);
  }
  (t == Tier::kDevice ? stats_.bytes_to_device : stats_.bytes_to_host) += e.bytes;
}

void TieredCache::RemoveLocked(uint64_t /*key*/, Entry& e) {
  if (e.tier == Tier::kDisk) return;
  HeapOf(e.tier).erase(e.rank);
  Used(e.tier) -= e.bytes;
  e.tier = Tier::kDisk;
  e.data.reset();
}

void TieredCache::DemoteLocked(uint64_t key, Entry& e) {
  Buffer data = e.data;
  RemoveLocked(key, e);
  e.data = std::move(data);
  const Rank rank = RankOf(key, e);
  if (CanFitLocked(Tier::kHost, e.bytes, rank)) {
    MakeRoomLocked(Tier::kHost, e.bytes, rank);
    InsertLocked(key, e, Tier::kHost, /*copy=*/true);
    stats_.demotions++;
  } else {
    e.data.reset();
    stats_.host_drops++;
  }
}

void TieredCache::RekeyLocked(uint64_t key, Entry& e) {
  if (e.tier == Tier::kDisk) return;
  Heap& h = HeapOf(e.tier);
  h.erase(e.rank);
  e.rank = RankOf(key, e);
  h.insert(e.rank);
}

Pin TieredCache::MakePinLocked(uint64_t key, Entry& e) {
  Pin p;
  p.tier_ = e.tier;
  p.data_ = e.data;
  p.key_ = key;
  if (e.tier != Tier::kDisk) {
    e.pins++;
    p.cache_ = this;
    p.generation_ = e.generation;
  }
  return p;
}

void TieredCache::Unpin(uint64_t key, uint64_t generation) {
  MutexLock l(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.generation != generation) return;
  if (it->second.pins > 0) it->second.pins--;
  if (it->second.pins == 0 && offload_blocked_) {
    offload_blocked_ = false;
    MaybeWakeOffloaderLocked();
  }
}

Pin TieredCache::Access(uint64_t key, uint32_t important_rows, uint32_t rows) {
  MutexLock l(&mu_);
  clock_++;
  auto [it, fresh] = entries_.try_emplace(key);
  Entry& e = it->second;
  if (fresh) e.generation = next_generation_++;
  important_rows = std::min(important_rows, rows);
  const double ratio = rows ? static_cast<double>(important_rows) / rows : 0.0;
  RecordAccess(&e.stats, ratio, clock_, opts_.params);
  const int t = static_cast<int>(e.tier);
  stats_.accesses++;
  stats_.hits[t]++;
  stats_.important_rows[t] += important_rows;
  stats_.rows[t] += rows;
  RekeyLocked(key, e);
  if (e.tier == Tier::kHost) {
    const Rank rank = RankOf(key, e);
    if (CanFitLocked(Tier::kDevice, e.bytes, rank)) {
      Buffer data = e.data;
      RemoveLocked(key, e);  // first, so that the device's victims may take its host room
      e.data = std::move(data);
      MakeRoomLocked(Tier::kDevice, e.bytes, rank);
      InsertLocked(key, e, Tier::kDevice, /*copy=*/true);
      stats_.promotions++;
      MaybeWakeOffloaderLocked();
    }
  }
  return MakePinLocked(key, e);
}

Pin TieredCache::Peek(uint64_t key) {
  MutexLock l(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return Pin();
  return MakePinLocked(key, it->second);
}

Pin TieredCache::Admit(uint64_t key, uint64_t bytes, Buffer data) {
  MutexLock l(&mu_);
  auto [it, fresh] = entries_.try_emplace(key);
  Entry& e = it->second;
  if (fresh) e.generation = next_generation_++;
  if (e.tier != Tier::kDisk) return MakePinLocked(key, e);  // admitted by another thread
  return PlaceLocked(key, e, bytes, std::move(data));
}

Pin TieredCache::Replace(uint64_t key, uint64_t bytes, Buffer data, Tier highest) {
  MutexLock l(&mu_);
  auto [it, fresh] = entries_.try_emplace(key);
  Entry& e = it->second;
  if (fresh) e.generation = next_generation_++;
  RemoveLocked(key, e);  // its pins stay counted: they still hold this generation
  return PlaceLocked(key, e, bytes, std::move(data), highest);
}

Pin TieredCache::PlaceLocked(uint64_t key, Entry& e, uint64_t bytes, Buffer data, Tier highest) {
  e.bytes = bytes;
  e.data = std::move(data);
  const Rank rank = RankOf(key, e);
  Tier placed = Tier::kDisk;
  for (Tier t : {Tier::kDevice, Tier::kHost}) {
    if (t < highest) continue;
    if (CanFitLocked(t, bytes, rank)) {
      MakeRoomLocked(t, bytes, rank);
      placed = t;
      break;
    }
  }
  stats_.admissions[static_cast<int>(placed)]++;
  if (placed == Tier::kDisk) {
    Pin p = MakePinLocked(key, e);  // unpinned, but hands the caller its data
    e.data.reset();
    return p;
  }
  InsertLocked(key, e, placed, /*copy=*/false);  // the disk read's buffer is the pool's
  MaybeWakeOffloaderLocked();
  return MakePinLocked(key, e);
}

void TieredCache::Erase(uint64_t key) {
  MutexLock l(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  RemoveLocked(key, it->second);
  entries_.erase(it);
  if (offload_blocked_) {
    offload_blocked_ = false;
    MaybeWakeOffloaderLocked();
  }
}

void TieredCache::OnRequestEvent(std::span<const uint64_t> keys, RequestEvent event) {
  double delta = 1.0;  // kEnterWindow, kStart
  if (event == RequestEvent::kFinish) delta = -2.0;
  if (event == RequestEvent::kLeaveWindow) delta = -1.0;
  MutexLock l(&mu_);
  for (uint64_t key : keys) {
    auto [it, fresh] = entries_.try_emplace(key);
    if (fresh) it->second.generation = next_generation_++;
    it->second.stats.car_score += delta;
    RekeyLocked(key, it->second);
  }
}

Tier TieredCache::TierOf(uint64_t key) const {
  MutexLock l(&mu_);
  auto it = entries_.find(key);
  return it == entries_.end() ? Tier::kDisk : it->second.tier;
}

std::vector<Tier> TieredCache::TiersOf(std::span<const uint64_t> keys) const {
  std::vector<Tier> out;
  out.reserve(keys.size());
  MutexLock l(&mu_);
  for (uint64_t key : keys) {
    auto it = entries_.find(key);
    out.push_back(it == entries_.end() ? Tier::kDisk : it->second.tier);
  }
  return out;
}

CacheStats TieredCache::stats() const {
  MutexLock l(&mu_);
  CacheStats s = stats_;
  s.device_used = device_used_;
  s.host_used = host_used_;
  s.device_chunks = device_.size();
  s.host_chunks = host_.size();
  return s;
}

bool TieredCache::OffloadPendingLocked() const {
  return offload_on_ && !offload_blocked_ &&
         static_cast<double>(device_used_) > watermark_ * static_cast<double>(opts_.device_bytes);
}

void TieredCache::MaybeWakeOffloaderLocked() {
  if (OffloadPendingLocked()) offload_cv_.Signal();
}

void TieredCache::OffloadLoop() {
  MutexLock l(&mu_);
  const double limit = watermark_ * static_cast<double>(opts_.device_bytes);
  for (;;) {
    while (!stop_ && !OffloadPendingLocked()) offload_cv_.Wait(&mu_);
    if (stop_) break;
    // One pass under the lock: demote the lowest unpinned chunks until below.
    while (static_cast<double>(device_used_) > limit) {
      uint64_t victim = 0;
      bool found = false;
      for (const Rank& r : device_) {
        if (entries_.at(r.key).pins == 0) {
          victim = r.key;
          found = true;
          break;
        }
      }
      if (!found) break;
      DemoteLocked(victim, entries_.at(victim));
      stats_.offloads++;
    }
    // Still above: only pinned chunks are left; wait for an unpin or erase.
    if (static_cast<double>(device_used_) > limit) offload_blocked_ = true;
    offload_idle_cv_.SignalAll();
  }
  offload_idle_cv_.SignalAll();
}

void TieredCache::TEST_WaitForOffload() {
  // The offloader holds mu_ for a whole pass, so "no work pending" observed
  // under mu_ means it is idle. (A flag set by the waker and cleared by the
  // thread could stay set forever when the work vanished before the thread
  // woke: that hung a test under ASan.)
  MutexLock l(&mu_);
  while (!stop_ && OffloadPendingLocked()) offload_idle_cv_.Wait(&mu_);
}

Status TieredCache::TEST_Validate() const {
  MutexLock l(&mu_);
  uint64_t used[2] = {0, 0};
  size_t count[2] = {0, 0};
  for (const auto& [key, e] : entries_) {
    if (e.tier == Tier::kDisk) {
      if (e.data) return Status::Corruption("chunk " + std::to_string(key) + " on disk keeps data");
      continue;
    }
    const int t = static_cast<int>(e.tier);
    used[t] += e.bytes;
    count[t]++;
    const Heap& h = e.tier == Tier::kDevice ? device_ : host_;
    const Heap& other = e.tier == Tier::kDevice ? host_ : device_;
    if (h.count(e.rank) != 1 || e.rank.key != key) {
      return Status::Corruption("chunk " + std::to_string(key) + " missing from its pool's order");
    }
    if (other.count(e.rank) != 0) {
      return Status::Corruption("chunk " + std::to_string(key) + " in both pools");
    }
  }
  if (used[0] != device_used_ || used[1] != host_used_) {
    return Status::Corruption("pool byte counts disagree with their chunks");
  }
  if (count[0] != device_.size() || count[1] != host_.size()) {
    return Status::Corruption("pool orders hold chunks that are not in the pool");
  }
  if (device_used_ > opts_.device_bytes || host_used_ > opts_.host_bytes) {
    return Status::Corruption("a pool is over its bound");
  }
  return Status::Ok();
}

}  // namespace tierkv::cache

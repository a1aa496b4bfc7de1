#include "store/header_cache.h"

#include <utility>

namespace tierkv::store {

bool KnownHeader::Matches(const Expect& e) const {
  return kind == e.kind && layer == e.layer && prefix_hash == e.prefix_hash &&
         first_token == e.first_token && tokens == e.tokens;
}

KnownHeader KnownHeader::Of(const RecordHeader& h) {
  return KnownHeader{h.kind, h.layer, h.prefix_hash, h.first_token, h.token_count, h.page_checksums};
}

void HeaderCache::Put(Location at, KnownHeader h) {
  auto k = std::make_shared<const KnownHeader>(std::move(h));
  MutexLock l(&mu_);
  known_[Key(at)] = std::move(k);
}

std::shared_ptr<const KnownHeader> HeaderCache::Find(Location at, const Expect& e) const {
  MutexLock l(&mu_);
  auto it = known_.find(Key(at));
  if (it == known_.end() || !it->second->Matches(e)) return nullptr;
  return it->second;
}

void HeaderCache::Erase(Location at) {
  MutexLock l(&mu_);
  known_.erase(Key(at));
}

void HeaderCache::EraseSegment(uint32_t segment) {
  MutexLock l(&mu_);
  std::erase_if(known_, [segment](const auto& kv) { return (kv.first >> 32) == segment; });
}

size_t HeaderCache::size() const {
  MutexLock l(&mu_);
  return known_.size();
}

}  // namespace tierkv::store

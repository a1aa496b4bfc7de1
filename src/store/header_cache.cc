#include "store/header_cache.h"

#include <string>

namespace tierkv::store {

bool KnownHeader::Matches(const Expect& e) const {
  return kind == e.kind && layer == e.layer && prefix_hash == e.prefix_hash &&
         first_token == e.first_token && tokens == e.tokens;
}

void HeaderCache::Put(Location at, const RecordHeader& h) {
  auto k = std::make_shared<KnownHeader>();
  k->kind = h.kind;
  k->layer = h.layer;
  k->prefix_hash = h.prefix_hash;
  k->first_token = h.first_token;
  k->tokens = h.token_count;
  k->page_checksums = h.page_checksums;
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

Status VerifyKnownPages(const char* record, const KnownHeader& h, const std::vector<bool>& pages) {
  for (uint32_t pg = 0; pg < pages.size(); ++pg) {
    if (!pages[pg]) continue;
    if (pg >= h.page_checksums.size() ||
        PageChecksum({record + kBlockSize * (1 + size_t{pg}), kBlockSize}) != h.page_checksums[pg]) {
      return Status::Corruption("payload page " + std::to_string(pg) + " checksum mismatch");
    }
  }
  return Status::Ok();
}

}  // namespace tierkv::store

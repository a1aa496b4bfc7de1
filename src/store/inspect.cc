#include <algorithm>

#include "store/chunk_store.h"
#include "tierkv/filesystem.h"
#include "tierkv/store.h"

namespace tierkv::store {

Result<StoreReport> InspectStore(const std::string& dir) {
  ASSIGN_OR_RETURN(StoreOptions o, ReadStoreIdentity(nullptr, dir));
  o.read_only = true;
  ASSIGN_OR_RETURN(std::unique_ptr<ChunkStore> st, ChunkStore::Open(o));
  const StoreStats s = st->stats();
  StoreReport r;
  r.dir = dir;
  r.model = o.model_description;
  r.fingerprint = o.fingerprint;
  r.chunk_tokens = o.chunk_tokens;
  r.layers = o.layers;
  r.row_bytes = o.row_bytes;
  r.probe_bytes = o.probe_bytes;
  r.dtype = o.dtype == KvDtype::kF16 ? "f16" : "f32";
  r.nodes = s.nodes;
  r.chunks = s.live_chunks;
  r.live_bytes = s.live_bytes;
  r.dead_bytes = s.dead_bytes;
  r.skipped_records = s.skipped_records;
  r.recovery_us = s.recovery_us;
  r.manifest_chunks = s.manifest_chunks;
  r.manifest_errors = s.manifest_errors;
  r.scanned_segments = s.scanned_segments;
  FileSystem* fs = FileSystem::Default();
  r.manifest_present = fs->FileExists(dir + "/MANIFEST");
  auto names = fs->ListDir(dir);
  if (names.ok()) {
    std::sort(names->begin(), names->end());
    for (const auto& n : *names) {
      if (n.rfind("seg-", 0) != 0) continue;
      auto size = fs->FileSize(dir + "/" + n);
      r.segments.emplace_back(n, size.ok() ? *size : 0);
    }
  }
  return r;
}

}  // namespace tierkv::store

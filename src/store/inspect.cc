#include <algorithm>

#include "store/cache_dir.h"
#include "store/chunk_store.h"
#include "tierkv/filesystem.h"
#include "tierkv/store.h"

namespace tierkv::store {

Result<StoreReport> InspectStore(const std::string& dir, const InspectOptions& options) {
  ASSIGN_OR_RETURN(StoreOptions o, ReadStoreIdentity(nullptr, dir));
  o.read_only = !options.repair;
  o.owner_files = options.owner_files;
  ASSIGN_OR_RETURN(std::unique_ptr<ChunkStore> st, ChunkStore::Open(o));
  StoreReport r{.dir = dir, .model = o.model_description, .fingerprint = o.fingerprint,
                .chunk_tokens = o.chunk_tokens, .layers = o.layers, .row_bytes = o.row_bytes,
                .probe_bytes = o.probe_bytes, .dtype = o.dtype == KvDtype::kF16 ? "f16" : "f32",
                .stats = st->stats()};
  const IoCostModel& io = st->io_model();
  r.io_source = io.source;
  r.io_per_io_us = io.per_io_us;
  r.io_mb_per_s = io.mb_per_s;
  r.io_merge_gap_blocks = io.MergeGapBlocks();
  if (options.verify || options.repair) {
    ASSIGN_OR_RETURN(r.verify, st->Verify(options.repair));
    r.verified = true;
    r.stats = st->stats();
  }
  FileSystem* fs = FileSystem::Default();
  r.manifest_present = fs->FileExists(dir + "/" + kManifestFile);
  auto segments = ListSegments(fs, dir);
  const auto live = st->LiveBytesBySegment();
  for (uint32_t seg : segments.ok() ? *segments : std::vector<uint32_t>{}) {
    auto size = fs->FileSize(SegmentPath(dir, seg));
    r.segments.emplace_back(SegmentFileName(seg), size.ok() ? *size : 0);
    auto it = std::lower_bound(live.begin(), live.end(), std::pair<uint32_t, uint64_t>(seg, 0));
    r.segment_live_bytes.push_back(it != live.end() && it->first == seg ? it->second : 0);
  }
  return r;
}

}  // namespace tierkv::store

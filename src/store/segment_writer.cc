#include "store/segment_writer.h"

#include "store/cache_dir.h"
#include "store/format.h"

namespace tierkv::store {

SegmentWriter::~SegmentWriter() {
  if (active_) active_->Close().IgnoreError();
}

Status SegmentWriter::OpenNext(uint32_t* opened) {
  // A new segment per process and whenever one is full: never append after
  // a possibly torn tail.
  if (active_) {
    RETURN_IF_ERROR(active_->Close());
    active_.reset();
  }
  const uint32_t next = last_ + 1;
  ASSIGN_OR_RETURN(active_, fs_->NewWritableFile(SegmentPath(dir_, next), /*truncate=*/true));
  last_ = next;
  *opened = next;
  return fs_->SyncDir(dir_);
}

ChunkStore::Location SegmentWriter::Next() const {
  return ChunkStore::Location{last_, static_cast<uint32_t>(active_->Size() / kBlockSize)};
}

Status SegmentWriter::Seal() {
  if (!active_) return Status::Ok();
  Status s = active_->Close();
  active_.reset();
  return s;
}

void SegmentWriter::Abandon() {
  if (active_) active_->Close().IgnoreError();
  active_.reset();
}

}  // namespace tierkv::store

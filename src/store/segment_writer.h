// The store's active segment: records are appended to one segment at a
// time, synced before they are published, and a segment that failed is
// abandoned (closed; the next write starts a new one after its possibly
// partial records, which recovery skips). Never appends to a segment of an
// earlier process. Not thread-safe: the store serialises its writers.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "store/chunk_store.h"
#include "tierkv/filesystem.h"
#include "tierkv/status.h"

namespace tierkv::store {

class SegmentWriter {
 public:
  SegmentWriter(FileSystem* fs, std::string dir, uint64_t segment_bytes)
      : fs_(fs), dir_(std::move(dir)), segment_bytes_(segment_bytes) {}
  ~SegmentWriter();

  // The highest segment number in use (recovery); the next segment follows it.
  void SetLast(uint32_t segment) { last_ = segment; }
  uint32_t last() const { return last_; }

  // Opens the next segment (the directory is synced). Its number in *opened.
  Status OpenNext(uint32_t* opened);
  bool open() const { return active_ != nullptr; }
  uint64_t segment_bytes() const { return segment_bytes_; }
  uint64_t size() const { return active_->Size(); }
  // Where the next append lands.
  ChunkStore::Location Next() const;
  Status Append(std::string_view bytes) { return active_->Append(bytes); }
  Status Sync() { return active_->Sync(); }
  // Closes the segment; the next write opens a new one.
  Status Seal();
  // After a failed write: closes without caring, drops the segment.
  void Abandon();

 private:
  FileSystem* fs_;
  std::string dir_;
  uint64_t segment_bytes_;
  std::unique_ptr<WritableFile> active_;
  uint32_t last_ = 0;  // the open segment's number, or the last one's
};

}  // namespace tierkv::store

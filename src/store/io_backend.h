// Batched reads behind one interface: io_uring (liburing) or pread.
//
// The caller hands a batch of reads; the backend keeps up to `queue_depth` of
// them in flight and returns when every one has finished. Demand reads are
// issued before prefetches. Files without an OS descriptor (in-memory or
// fault-injecting file systems) are read through RandomAccessFile::Read, so
// the same code path runs under fault injection.
//
// Thread safety: one thread at a time per backend (the I/O thread owns it).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "tierkv/filesystem.h"
#include "tierkv/status.h"

namespace tierkv::store {

struct ReadOp {
  const RandomAccessFile* file = nullptr;
  uint64_t offset = 0;
  size_t length = 0;
  char* buf = nullptr;
  bool prefetch = false;  // demand reads (false) go first
  // Out: bytes read (short only at end of file) and the op's status.
  size_t done = 0;
  Status status;
};

struct IoOptions {
  uint32_t queue_depth = 32;
};

class IoBackend {
 public:
  virtual ~IoBackend() = default;
  virtual std::string_view name() const = 0;
  uint32_t queue_depth() const { return depth_; }

  // Performs every op. Returns OK when the batch ran; each op's own status
  // says whether it succeeded (a failed read never fails the others).
  // A short read is retried until end of file.
  virtual Status Read(std::span<ReadOp> ops) = 0;

  // Registers memory for io_uring's fixed buffers (faster: no page pinning per
  // read). Optional; a no-op for pread. REQUIRES: no Read in flight.
  virtual Status RegisterBuffer(char* base, size_t bytes) { return Status::Ok(); }

 protected:
  explicit IoBackend(uint32_t depth) : depth_(depth) {}
  uint32_t depth_;
};

// kind: "uring", "pread" or "auto" (io_uring when the kernel allows it).
// InvalidArgument for an unknown kind or a depth outside 1..4096;
// Unavailable when io_uring was asked for and the kernel refuses it.
Result<std::unique_ptr<IoBackend>> NewIoBackend(std::string_view kind, IoOptions options = {});

// Whether io_uring works here (probes once).
bool UringAvailable();

// Memory aligned for O_DIRECT (kBlockSize), freed with std::free.
struct AlignedFree {
  void operator()(char* p) const;
};
using AlignedBuffer = std::unique_ptr<char[], AlignedFree>;
AlignedBuffer AllocateAligned(size_t bytes);

}  // namespace tierkv::store

// Anonymous memory for large buffers that are read again and again in full
// (a model's weights, streamed once per decoded token), asking the kernel
// for transparent huge pages (2 MiB on x86-64) so that streaming them does
// not miss the TLB every 4 KiB.
//
// Why: a file mapping's page-cache pages are 4 KiB. On the 2-core AMD EPYC
// of docs/engine.md, two threads summing a 703 MB model read it 1.3-1.4x as
// fast from a copy in huge pages as from the file's mapping, and decode of
// the 1B-shape Q4_K model ran faster with its rows copied (docs/engine.md,
// "Weights in huge pages").
//
// The buffer is zeroed, aligned to 2 MiB and owned by the object (unmapped
// when it is destroyed). Huge pages are advice: with transparent huge pages
// off ("never") or none free the kernel backs the buffer with 4 KiB pages,
// which works the same, only slower.
//
// Thread safety: data() may be read and written from any thread; the
// object itself is immutable after Allocate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tierkv/status.h"

namespace tierkv {

class HugePageBuffer {
 public:
  // At least `bytes` bytes (rounded up to whole 2 MiB pages); ResourceExhausted
  // when the address space or the overcommit limit refuses them.
  static Result<std::unique_ptr<HugePageBuffer>> Allocate(size_t bytes);
  ~HugePageBuffer();
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

  static constexpr size_t kPageBytes = size_t{2} << 20;

  // Whether the kernel gives transparent huge pages to a buffer that asks
  // (/sys/kernel/mm/transparent_hugepage/enabled is "always" or "madvise").
  static bool Available();

 private:
  HugePageBuffer(void* map, size_t map_bytes, uint8_t* data, size_t size)
      : map_(map), map_bytes_(map_bytes), data_(data), size_(size) {}
  void* map_;         // the whole mapping, with the slack used to align data_
  size_t map_bytes_;
  uint8_t* data_;     // 2 MiB aligned, inside map_
  size_t size_;
};

}  // namespace tierkv

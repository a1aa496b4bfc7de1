#include "util/huge_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

namespace tierkv {

Result<std::unique_ptr<HugePageBuffer>> HugePageBuffer::Allocate(size_t bytes) {
  constexpr size_t kPage = kPageBytes;
  if (bytes > (SIZE_MAX >> 1)) {
    return Status::InvalidArgument("huge-page buffer of " + std::to_string(bytes) + " bytes");
  }
  const size_t size = (bytes + kPage - 1) / kPage * kPage;
  // mmap aligns only to 4 KiB: map one huge page more and start at the
  // first 2 MiB boundary, so that every page of the buffer can be huge.
  const size_t map_bytes = size + kPage;
  void* map = ::mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) {
    return Status::ResourceExhausted("mmap of " + std::to_string(map_bytes) + " bytes: " + std::strerror(errno));
  }
  const auto at = (reinterpret_cast<uintptr_t>(map) + kPage - 1) / kPage * kPage;
  auto* data = reinterpret_cast<uint8_t*>(at);
  // Advice only: EINVAL where the kernel has no transparent huge pages.
  if (size > 0) ::madvise(data, size, MADV_HUGEPAGE);
  return std::unique_ptr<HugePageBuffer>(new HugePageBuffer(map, map_bytes, data, size));
}

bool HugePageBuffer::Available() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(f, line)) return false;
  return line.find("[always]") != std::string::npos || line.find("[madvise]") != std::string::npos;
}

HugePageBuffer::~HugePageBuffer() { ::munmap(map_, map_bytes_); }

}  // namespace tierkv

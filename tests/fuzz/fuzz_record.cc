// libFuzzer target: a record's header decoding and page checks on arbitrary
// bytes (the first 4 KiB are the header block, the rest its pages).
#include <cstddef>
#include <cstdint>
#include <span>

#include "store/format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tierkv::store;
  if (size < kBlockSize) return 0;
  const char* bytes = reinterpret_cast<const char*>(data);
  auto h = DecodeHeader(std::span<const char, kBlockSize>(bytes, kBlockSize));
  if (!h.ok()) return 0;
  for (uint32_t p = 0; p < h->page_checksums.size() && (2 + size_t{p}) * kBlockSize <= size; ++p) {
    PageChecksumOk(*h, p, {bytes + (1 + size_t{p}) * kBlockSize, kBlockSize});
  }
  return 0;
}

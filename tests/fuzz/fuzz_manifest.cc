// libFuzzer target: the manifest decoder on arbitrary bytes; what decodes
// must encode and decode again to the same manifest.
#include <cstddef>
#include <cstdint>
#include <string>

#include "store/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tierkv::store;
  auto m = DecodeManifest(std::string(reinterpret_cast<const char*>(data), size));
  if (!m.ok()) return 0;
  const std::string once = EncodeManifest(*m);
  auto again = DecodeManifest(once);
  if (!again.ok() || EncodeManifest(*again) != once) __builtin_trap();
  return 0;
}

#include "tierkv/hex.h"

#include <cinttypes>
#include <cstdio>

namespace tierkv {

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

}  // namespace tierkv

// Number formatting shared by the report's tables.
#pragma once

#include <cstdio>
#include <string>

namespace tierkv::bench {

// printf's rendering of one number (`f` is a format with one double).
inline std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace tierkv::bench

// Wall time since a steady_clock point, the one helper every timing site
// shares (steady, so a clock step does not skew a measurement).
#pragma once

#include <chrono>

namespace tierkv {

inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline double MsSince(std::chrono::steady_clock::time_point t0) { return SecondsSince(t0) * 1e3; }

}  // namespace tierkv

// Wall time between steady_clock points, the helpers every timing site
// shares (steady, so a clock step does not skew a measurement).
#pragma once

#include <chrono>

namespace tierkv {

inline double SecondsBetween(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

inline double MsBetween(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
  return SecondsBetween(from, to) * 1e3;
}

inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return SecondsBetween(t0, std::chrono::steady_clock::now());
}

inline double MsSince(std::chrono::steady_clock::time_point t0) { return SecondsSince(t0) * 1e3; }

}  // namespace tierkv

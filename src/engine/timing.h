// The engine's clock: request-relative times in milliseconds.
#pragma once

#include <chrono>

namespace tierkv::engine {

using Clock = std::chrono::steady_clock;

inline double Ms(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

}  // namespace tierkv::engine

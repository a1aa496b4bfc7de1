// The engine's clock: request-relative times in milliseconds (MsBetween,
// tierkv/elapsed.h).
#pragma once

#include <chrono>

#include "tierkv/elapsed.h"

namespace tierkv::engine {

using Clock = std::chrono::steady_clock;

}  // namespace tierkv::engine

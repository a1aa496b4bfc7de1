// This process's resident memory, as /proc/self/status reports it: what
// `tierkv info` and `bench-engine` show beside llama.cpp's.
#pragma once

#include <cstdint>

namespace tierkv {

struct ResidentSize {
  uint64_t current = 0;  // VmRSS, bytes (0 where /proc does not say)
  uint64_t peak = 0;     // VmHWM, bytes
};

ResidentSize ReadResidentSize();

}  // namespace tierkv

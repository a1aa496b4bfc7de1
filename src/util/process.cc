#include "tierkv/process.h"

#include <fstream>
#include <sstream>
#include <string>

namespace tierkv {

ResidentSize ReadResidentSize() {
  std::ifstream in("/proc/self/status");
  ResidentSize r;
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream s(line.substr(colon + 1));
    uint64_t kb = 0;
    s >> kb;
    if (line.rfind("VmRSS:", 0) == 0) r.current = kb * 1024;
    if (line.rfind("VmHWM:", 0) == 0) r.peak = kb * 1024;
  }
  return r;
}

}  // namespace tierkv

#include "tierkv/tools/plot.h"

#include <cstdlib>

namespace tierkv::bench {

std::string RunGnuplot(const std::string& gp, const std::string& png) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) return "gnuplot not found: no PNG";
  const std::string cmd = "gnuplot '" + gp + "' 2>&1";
  if (std::system(cmd.c_str()) != 0) return "gnuplot failed: no PNG";
  return "wrote " + png;
}

}  // namespace tierkv::bench

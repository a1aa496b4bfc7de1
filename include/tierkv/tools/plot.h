// PNG plots through gnuplot (Debian's gnuplot-nox), optional at run time:
// reports write their tables whether or not it is installed.
#pragma once

#include <string>

namespace tierkv::bench {

// Runs gnuplot on the script `gp` (which writes `png`); returns what
// happened, for the report: "wrote <png>", "gnuplot not found: no PNG" or
// "gnuplot failed: no PNG".
std::string RunGnuplot(const std::string& gp, const std::string& png);

}  // namespace tierkv::bench

#include "tierkv/tools/plot.h"

#include <cstdlib>
#include <filesystem>

namespace tierkv::bench {

std::string RunGnuplot(const std::string& gp, const std::string& png) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) return "gnuplot not found: no PNG";
  // The path single-quoted for the shell, a quote inside it closed, escaped
  // and reopened.
  std::string quoted = "'";
  for (char c : gp) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  // Its messages go to a log beside the script, not into our stdout
  // (bench --json prints the results there).
  const std::string cmd = "gnuplot " + quoted + " >" + quoted.substr(0, quoted.size() - 1) + ".log' 2>&1";
  if (std::system(cmd.c_str()) != 0) return "gnuplot failed: no PNG (its messages: " + std::filesystem::path(gp).filename().string() + ".log)";
  return "wrote " + png;
}

}  // namespace tierkv::bench

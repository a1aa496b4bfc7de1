// The report's accuracy section (WriteReport): generation-task scores per
// system and task, score against cold TTFT and against disk reads, and
// depth x length heatmaps (src/bench/accuracy_report.cc).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tierkv::bench {

// Markdown (and PNGs in `dir` where gnuplot is installed) for one
// experiment whose runs scored generation tasks; "" when none did.
std::string AccuracySection(const nlohmann::json& exp, const std::string& dir);

}  // namespace tierkv::bench

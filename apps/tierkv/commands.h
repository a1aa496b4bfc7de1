// Subcommands of the tierkv tool. Each Add* registers its flags on the app and
// sets *run to the action to take when the subcommand is chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace tierkv::app {

using Action = std::function<int()>;

void AddRun(CLI::App& app, Action* run);
void AddConvert(CLI::App& app, Action* run);
void AddBenchEngine(CLI::App& app, Action* run);
void AddEval(CLI::App& app, Action* run);
void AddAnalyze(CLI::App& app, Action* run);

// Prints "tierkv: error: <message>" to stderr and returns the exit code 1.
int Fail(const std::string& message);

// A progress callback (done, total) for long work: a line rewritten in place
// on a terminal, else a line per tenth of the work.
std::function<void(int, int)> ProgressPrinter(const std::string& unit);

}  // namespace tierkv::app

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

// Prints "tierkv: error: <message>" to stderr and returns the exit code 1.
int Fail(const std::string& message);

}  // namespace tierkv::app

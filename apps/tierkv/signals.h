// SIGINT, SIGTERM and SIGHUP end the process the same way wherever it is:
// the scratch directories it made are removed first. main() calls
// InstallSignalCleanup before any other thread exists (threads inherit its
// signal mask); a `tierkv-signal` thread then waits for those signals and
// exits with 128 + the signal after the cleanup. A command that ends
// itself cleanly (serve) sets a shutdown handler: the first signal runs it,
// a second one exits as above.
#pragma once

#include <functional>
#include <string>

namespace tierkv::app {

void InstallSignalCleanup();
// A directory to remove if a signal ends the process (until unregistered).
void RegisterScratch(const std::string& dir);
void UnregisterScratch(const std::string& dir);
// Run on the `tierkv-signal` thread at the first signal instead of exiting.
void SetShutdownHandler(std::function<void()> handler);

}  // namespace tierkv::app

// The remote tier's flags (--remote and its options), shared by run, check,
// compare, bench and serve.
#pragma once

#include <CLI/CLI.hpp>

#include "tierkv/remote.h"

namespace tierkv::app {

void AddRemoteFlags(CLI::App* sub, RemoteOptions* r);

}  // namespace tierkv::app

// The harness's quality pass (tierkv/harness.h): fidelity against
// recompute, exactness against as-like, and task accuracy.
#pragma once

#include <cstdint>
#include <span>

#include <nlohmann/json.hpp>

#include "tierkv/engine.h"
#include "tierkv/harness.h"

namespace tierkv::bench {

// `base` for system `sys` with the pools sized as o's shares of `stored`.
engine::EngineOptions PoolSized(const engine::EngineOptions& base, engine::System sys, const HarnessOptions& o,
                                uint64_t stored);

// Serves every request (query, or query + each choice) with each system of
// `o` from cold pools and with recompute, and sets per[system]["quality"].
Status AddQuality(const Model& model, std::span<const TaskRequest> reqs, const HarnessOptions& o, uint64_t stored,
                  nlohmann::json* per);

}  // namespace tierkv::bench

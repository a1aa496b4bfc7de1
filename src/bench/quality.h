// The harness's quality pass (tierkv/tools/harness.h): fidelity against
// recompute, exactness against as-like, and task accuracy.
#pragma once

#include <cstdint>
#include <span>

#include <nlohmann/json.hpp>

#include "tierkv/engine.h"
#include "tierkv/tools/harness.h"

namespace tierkv::bench {

// Serves every request (query, or query + each choice) with each system of
// `o` from cold pools (recompute's logits from o.reference when it holds
// them), and sets per[system]["quality"].
Status AddQuality(const Model& model, std::span<const TaskRequest> reqs, const HarnessOptions& o, uint64_t stored,
                  nlohmann::json* per);

}  // namespace tierkv::bench

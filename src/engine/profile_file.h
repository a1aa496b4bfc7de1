// The profile files an engine keeps beside its store (car's sparsity, the
// fitted probe thresholds): JSON objects stamped with the store's
// fingerprint, so that another model's profile is never used.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "tierkv/status.h"

namespace tierkv::engine {

// The object of a profile file's text, if it is a JSON object whose
// 'fingerprint' is `fingerprint`; InvalidArgument naming what is wrong.
Result<nlohmann::json> ParseProfileFile(const std::string& text, uint64_t fingerprint);

}  // namespace tierkv::engine

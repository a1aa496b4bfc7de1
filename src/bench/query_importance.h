// A query's H2O importance over a prefix, as the studies measure it
// (analyze attention, analyze needles): the prefix prefilled with its K/V
// captured (fp32), then the query prefilled over those rows with column
// sums on; per layer and KV head, the query heads of a GQA group summed.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tierkv/model.h"
#include "tierkv/status.h"

namespace tierkv::bench {

// [layer][kv head][prefix row]. Errors: the model's (a token out of range,
// past the context).
Result<std::vector<std::vector<std::vector<float>>>> QueryImportance(const Model& model,
                                                                     std::span<const int32_t> prefix,
                                                                     std::span<const int32_t> query);

}  // namespace tierkv::bench

// The important rows of remote chunks that only the remote tier holds
// (RemoteRead::kImportant, CaR's sparsified far tier): each layer's
// attention gets them after the rows its source chose from the local prefix.
#pragma once

#include "engine/request.h"
#include "tierkv/model.h"

namespace tierkv::engine {

// Appends rq.far's rows of `layer` to `prefix` (per KV head; the prefix's
// heads are the source's rows, fp16, or none when nothing local is reused).
// The combined rows live in rq.far_scratch until the next layer's call.
Status AppendFarRows(const ModelConfig& c, Request& rq, int layer, LayerPrefix* prefix);

}  // namespace tierkv::engine

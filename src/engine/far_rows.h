// The important rows of remote chunks that only the remote tier holds
// (RemoteRead::kImportant, CaR's sparsified far tier): each layer's
// attention gets them after the rows its source chose from the local prefix.
// A selective request's tail rows (request.h) take the same way.
#pragma once

#include "engine/pooled_reader.h"
#include "engine/request.h"
#include "tierkv/model.h"

namespace tierkv::engine {

// Appends rq.far's rows of `layer` to `prefix` (per KV head; the prefix's
// heads are the source's rows, fp16, or none when nothing local is reused).
// The combined rows live in rq.far_scratch until the next layer's call.
// Without far rows, appends rq.tail's rows the same way.
Status AppendFarRows(const ModelConfig& c, Request& rq, int layer, LayerPrefix* prefix);

// Reads every layer's rows [from, to) of the match `m` whole (fp16,
// token-major) into *tail: a selective request's short last chunk. A row
// that fails its checksum fails the read (the caller computes the rows).
Status ReadTailRows(PooledReader& reader, const store::LookupResult& m, size_t from, size_t to,
                    int n_layers, remote::FarRows* tail, IoCounts* io);

}  // namespace tierkv::engine

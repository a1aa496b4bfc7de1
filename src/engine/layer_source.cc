#include "engine/layer_source.h"

#include <algorithm>

#include "engine/options.h"
#include "select/importance.h"
#include "store/format.h"

namespace tierkv::engine {

std::unique_ptr<LayerSource> MakeLayerSource(const SourceDeps& deps) {
  return deps.row->make_source ? deps.row->make_source(deps) : nullptr;
}

const std::vector<uint32_t>& RowGroups(const SourceDeps& deps, Request& rq) {
  std::vector<uint32_t>& groups = rq.unit_groups;
  if (groups.size() == rq.R) return groups;  // every layer of the request after the first
  const uint32_t row_bytes = deps.reader->geometry().row_bytes;
  const SelectionUnit u = ResolveUnit(deps.options->unit, rq.retention, rq.R, row_bytes);
  switch (u.granularity) {
    case Granularity::kToken:
    case Granularity::kAuto: break;
    case Granularity::kPage:
    case Granularity::kBlock: {
      // A page of a chunk's own record holds consecutive tokens (chunks
      // start on page boundaries); a block is any run of tokens.
      const size_t per = RowsPerUnit(u, row_bytes);
      groups.resize(rq.R);
      for (size_t j = 0; j < rq.R; ++j) groups[j] = static_cast<uint32_t>(j / per);
      break;
    }
  }
  return groups;
}

std::vector<int32_t> KeepRows(std::span<const float> scores, const std::vector<uint32_t>& groups, size_t k) {
  return groups.empty() ? select::TopK(scores, k) : select::TopGroups(scores, groups, k);
}

std::shared_ptr<Fetch> FetchLayer(const SourceDeps& deps, Request& rq, SourceState& st, int layer, LayerRead read) {
  const store::LookupResult* m = rq.m;
  const size_t R = rq.R;
  PooledReader* reader = deps.reader;
  return st.Track(deps.queue->Read(rq.t0, layer, [reader, m, R, layer, read](Fetch& f, IoCounts* io) {
    return read(*reader, *m, R, layer, f, io);
  }));
}

void FetchEveryLayer(const SourceDeps& deps, Request& rq, SourceState& st, std::vector<std::shared_ptr<Fetch>>* into,
                     LayerRead read) {
  for (int l = 0; l < deps.config->n_layers; ++l) (*into)[l] = FetchLayer(deps, rq, st, l, read);
}

Status SelectiveSource::Supply(Request& rq, const LayerView& view, LayerPrefix* prefix,
                               LayerTrace* trace) {
  // Reads issued inside the layer; a read ahead (spec) sets its own times.
  trace->issued_ms = trace->completed_ms = MsSince(rq.t0);
  LayerWork work(view, trace);
  Status s = SupplyLayer(rq, work, prefix);
  if (s.ok()) {
    rq.load_ms += work.io_ms;
    trace->wait_ms = work.io_ms;
    rq.io.Add(work.io);
    trace->retention = rq.R ? static_cast<double>(trace->rows) / static_cast<double>(rq.R) : 1.0;
  }
  trace->consumed_ms = MsSince(rq.t0);
  if (!trace->speculated) trace->completed_ms = trace->consumed_ms;  // a read ahead set its own
  return s;
}

}  // namespace tierkv::engine

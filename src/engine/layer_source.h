// Where a layer's prefix rows come from: one implementation per kind of
// selection in the system table (all rows, H2O, probe heads, speculation
// around the probe heads). A source lives as long as its engine and keeps
// what it learns across requests; what it keeps for one request is its own
// SourceState (request.h), returned by Start.
//
// Order of calls for one attempt: Start (compute thread, after the lookup;
// submits reads that do not depend on the queries to the load thread), then
// Supply once per layer from the model's hook (compute thread), then, if the
// forward pass succeeded and every fetch is done, Finish.
#pragma once

#include <memory>

#include "engine/io_counts.h"
#include "engine/load_queue.h"
#include "engine/pooled_reader.h"
#include "engine/probe_profile.h"
#include "engine/request.h"
#include "engine/system_table.h"
#include "engine/timing.h"
#include "store/chunk_store.h"
#include "tierkv/engine.h"
#include "tierkv/model.h"

namespace tierkv::engine {

// What sources may use; owned by the engine, outliving every source.
struct SourceDeps {
  const ModelConfig* config = nullptr;
  const EngineOptions* options = nullptr;
  const SystemRow* row = nullptr;
  PooledReader* reader = nullptr;
  LoadQueue* queue = nullptr;
  store::ChunkStore* store = nullptr;
  const ProbeProfile* probe_profile = nullptr;  // alpha_auto: the fitted thresholds
  const Model* model = nullptr;                 // spec's query predictor projects with it
};

// Submits one read per layer to the load thread, each into into[layer]:
// `read(reader, lookup, R, layer, fetch, counts)`.
using LayerRead = Status (*)(PooledReader&, const store::LookupResult&, size_t, int, Fetch&, IoCounts*);

// The reads a source's Start submits for every layer: those that do not
// depend on the queries (all rows, all keys, the probe heads' keys), the
// pool entries they fill, and their size per prefix row. What a prefetch
// loads ahead of a request, and what says whether its prefix is pooled.
struct StartReads {
  LayerRead read = nullptr;
  EntryKind entry = EntryKind::kWhole;
  uint32_t bytes_per_row = 0;
};

class LayerSource {
 public:
  virtual ~LayerSource() = default;
  virtual StartReads QueryFreeReads() const = 0;
  // Bytes an ideal reader would have read for what one layer of R prefix
  // rows used (its `trace`): the measure RequestStats::ideal_bytes sums.
  virtual uint64_t IdealBytes(const LayerTrace& trace, uint64_t R) const = 0;
  // The request reuses R > 0 rows: submit the reads known now; returns the
  // source's state for this attempt (the engine keeps it in rq.state).
  virtual std::unique_ptr<SourceState> Start(Request& rq) = 0;
  // Before layer `view.layer`'s attention: the prefix rows it attends to,
  // per KV head, in `prefix`; the layer's trace in `trace`.
  virtual Status Supply(Request& rq, const LayerView& view, LayerPrefix* prefix,
                        LayerTrace* trace) = 0;
  // After a successful forward pass, with every fetch done: what later
  // requests learn from this one, and reads not yet counted.
  virtual void Finish(Request& rq, const RequestStats& stats) {}
};

// Submits `read` of `layer` to the load thread; st tracks it.
std::shared_ptr<Fetch> FetchLayer(const SourceDeps& deps, Request& rq, SourceState& st, int layer, LayerRead read);
// Submits `read` for every layer to the load thread, each into into[layer].
void FetchEveryLayer(const SourceDeps& deps, Request& rq, SourceState& st, std::vector<std::shared_ptr<Fetch>>* into,
                     LayerRead read);

// The selection unit's groups of R's rows (the options' unit): empty for
// single rows; the rows of one 4 KiB page of a chunk's own record (token
// order); blocks of consecutive tokens. The same for every layer: computed
// once per attempt and kept in the request.
const std::vector<uint32_t>& RowGroups(const SourceDeps& deps, Request& rq);
// The rows kept by `scores`: the top k, or whole groups (select::TopGroups).
std::vector<int32_t> KeepRows(std::span<const float> scores, const std::vector<uint32_t>& groups, size_t k);

// The source of a system's row (null for a system that reuses nothing):
// the row's make_source.
std::unique_ptr<LayerSource> MakeLayerSource(const SourceDeps& deps);
// A row's make_source for source type S.
template <typename S>
std::unique_ptr<LayerSource> SourceOf(const SourceDeps& deps) {
  return std::make_unique<S>(deps);
}

// One selective layer's work in progress: its start, the time spent waiting
// for reads, and what the reads cost.
struct LayerWork {
  LayerWork(const LayerView& v, LayerTrace* t) : view(v), trace(t), t0(Clock::now()) {}
  const LayerView& view;
  LayerTrace* trace;
  Clock::time_point t0;
  double io_ms = 0;
  IoCounts io;
  // Runs a read, counting its time as waiting.
  template <typename F>
  Status Timed(F&& read) {
    const auto a = Clock::now();
    Status s = read();
    io_ms += MsSince(a);
    return s;
  }
  // Time since the layer started that was not waiting: identification.
  double BusyMs() const { return MsSince(t0) - io_ms; }
};

// The selective sources' common frame: trace times, and the layer's reads
// and waits added to the request's.
class SelectiveSource : public LayerSource {
 public:
  Status Supply(Request& rq, const LayerView& view, LayerPrefix* prefix, LayerTrace* trace) final;

 protected:
  virtual Status SupplyLayer(Request& rq, LayerWork& work, LayerPrefix* prefix) = 0;
};

}  // namespace tierkv::engine

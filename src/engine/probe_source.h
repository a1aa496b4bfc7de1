// IMPRESS's identification (4.3): the probe heads' keys of R (read at the
// request's start) score R's rows; when the heads agree (mean pairwise
// Jaccard >= j^alpha) their aggregated top-k is the layer's shared set and
// only its rows are read; otherwise the layer falls back (the options'
// `fallback`): to all of R's rows, or to H2O over all keys. A layer that
// fell back gets its fallback's query-free read (whole records, or all
// keys) requested at the start of the next request. Reports each layer's
// importance when the system's row says so (reordering).
#pragma once

#include <vector>

#include "engine/h2o_source.h"
#include "engine/layer_source.h"
#include "select/identify.h"
#include "tierkv/mutex.h"

namespace tierkv::engine {

// Every layer's probe keys (at the start), and the fallback reads of the
// layers that fell back in the last request: all keys (H2O's part of the
// state) or whole layers.
struct ProbeState : H2oState {
  explicit ProbeState(int n_layers) : H2oState(n_layers), probe_fetch(n_layers), whole(n_layers) {}
  std::vector<std::shared_ptr<Fetch>> probe_fetch, whole;
};

class ProbeSource : public SelectiveSource {
 public:
  explicit ProbeSource(const SourceDeps& deps);
  std::unique_ptr<SourceState> Start(Request& rq) override;
  // Start's reads into `st` (spec's state derives from ProbeState).
  void StartInto(Request& rq, ProbeState& st);
  StartReads QueryFreeReads() const override;
  // The probe keys and the kept rows' K and V; on fallback, every key and
  // the kept values (as H2O).
  uint64_t IdealBytes(const LayerTrace& trace, uint64_t R) const override;
  void Finish(Request& rq, const RequestStats& stats) override;

  // The probe heads' decision for the layer (its keys awaited or read);
  // on agreement the shared set is reported as importance (if the row
  // says), on disagreement the request's fallbacks count it.
  Result<select::ProbeDecision> Identify(Request& rq, LayerWork& work);
  // The decision itself: `view`'s queries (of layer view.layer) scored
  // against the layer's probe keys `keys` (R rows of the probe heads, fp16).
  // No side effects: spec's query predictor decides for a layer ahead with it.
  select::ProbeDecision Decide(Request& rq, const LayerView& view, const std::string& keys) const;
  // Reads the shared set's rows (those in `given` from there) and hands
  // them to the attention.
  Status ReadShared(Request& rq, LayerWork& work, const std::vector<int32_t>& shared,
                    const Supplied* given, LayerPrefix* prefix);
  // The layer's fallback: all of R's rows, or H2O's per-head sets;
  // `selected` (optional) gets the rows read (all of R, or the union of the
  // heads' sets).
  Status Fallback(Request& rq, LayerWork& work, LayerPrefix* prefix, std::vector<int32_t>* selected);

 protected:
  Status SupplyLayer(Request& rq, LayerWork& work, LayerPrefix* prefix) override;

 private:
  // Fallback to all rows: the whole records requested at the start, or read now.
  Status AllRows(Request& rq, LayerWork& work, LayerPrefix* prefix);

  SourceDeps d_;
  H2oSource h2o_;
  select::IdentifyOptions identify_;
  Mutex mu_;
  // Per layer: whether its identification fell back in the last request.
  std::vector<bool> fell_back_last_ TIERKV_GUARDED_BY(mu_);
};

}  // namespace tierkv::engine

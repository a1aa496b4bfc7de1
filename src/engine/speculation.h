// SPEC's speculation around the probe heads: once layer l has its own rows,
// a prediction of layer l+1's set is read on the load thread while layer l
// computes. Layer l+1 reads only what the prediction missed, beside the
// read ahead, and waits for the longer of the two. The prediction
// (EngineOptions::spec_predictor): layer l's set when its probes agreed
// (adjacent layers attend to much the same rows, SPEC IV-C), or layer
// l+1's own probe decision made with the queries it would compute from
// layer l's input. A layer is read ahead only while its prediction's
// recall (a moving average over requests, measured whether or not it was
// read ahead) holds at least spec_min_recall.
#pragma once

#include <vector>

#include "engine/probe_source.h"
#include "tierkv/mutex.h"

namespace tierkv::engine {

// The probe source's state, and by layer: the read ahead of the predicted
// rows, the prediction, whether to read it ahead (the layer's recall).
struct SpecState final : ProbeState {
  explicit SpecState(int n_layers)
      : ProbeState(n_layers), prefetch(n_layers), predicted(n_layers), speculate(n_layers, true) {}
  std::vector<std::shared_ptr<Fetch>> prefetch;
  std::vector<std::vector<int32_t>> predicted;
  std::vector<bool> speculate;
};

class SpeculatingSource : public SelectiveSource {
 public:
  explicit SpeculatingSource(const SourceDeps& deps) : d_(deps), probes_(deps) {}
  std::unique_ptr<SourceState> Start(Request& rq) override;
  StartReads QueryFreeReads() const override { return probes_.QueryFreeReads(); }
  uint64_t IdealBytes(const LayerTrace& trace, uint64_t R) const override { return probes_.IdealBytes(trace, R); }
  void Finish(Request& rq, const RequestStats& stats) override;

  // Weight of the past in the recall's moving average (the new request's
  // recall weighs 1 - kRecallMemory).
  static constexpr double kRecallMemory = 0.7;

 protected:
  Status SupplyLayer(Request& rq, LayerWork& work, LayerPrefix* prefix) override;

 private:
  // Reads `rows` of layer `layer` ahead on the load thread.
  void ReadAhead(Request& rq, int layer, std::vector<int32_t> rows);
  Status UseShared(Request& rq, LayerWork& work, const std::vector<int32_t>& shared,
                   LayerPrefix* prefix);
  // After layer l has its own rows: predicts layer l+1's (`shared`: layer
  // l's set when its probes agreed, else null) and reads them ahead when the
  // layer's recall allows.
  Status PredictNext(Request& rq, LayerWork& work, const std::vector<int32_t>* shared);
  // The query predictor's set for layer l+1 (empty when it predicts a
  // fallback or has no input rows or probe keys to work with).
  Result<std::vector<int32_t>> FromQueries(Request& rq, LayerWork& work);

  SourceDeps d_;
  ProbeSource probes_;
  Mutex mu_;
  // Per layer: the moving average of the prediction's recall (1 at first).
  std::vector<double> recall_ TIERKV_GUARDED_BY(mu_);
};

}  // namespace tierkv::engine

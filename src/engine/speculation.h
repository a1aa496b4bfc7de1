// SPEC's speculation around the probe heads: adjacent layers attend to much
// the same rows, so right after layer l's identification (when its probes
// agreed) layer l's set is read for layer l+1 on the load thread, once layer
// l has its own rows, while layer l computes. Layer l+1 reads only what the
// prediction missed, beside the read ahead, and waits for the longer of the
// two. A layer is read ahead only while its prediction's recall (a moving
// average over requests, measured whether or not it was read ahead) holds
// at least spec_min_recall.
#pragma once

#include <vector>

#include "engine/probe_source.h"
#include "tierkv/mutex.h"

namespace tierkv::engine {

class SpeculatingSource : public SelectiveSource {
 public:
  explicit SpeculatingSource(const SourceDeps& deps) : d_(deps), probes_(deps) {}
  void Start(Request& rq) override;
  StartReads QueryFreeReads() const override { return probes_.QueryFreeReads(); }
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

  SourceDeps d_;
  ProbeSource probes_;
  Mutex mu_;
  // Per layer: the moving average of the prediction's recall (1 at first).
  std::vector<double> recall_ TIERKV_GUARDED_BY(mu_);
};

}  // namespace tierkv::engine

// H2O selection (the as-h2o baselines, car, and impress's fallback): all of
// R's keys, each KV head's top-k by the new tokens' attention, and only the
// selected rows' values. k is the request's retention of R, or the layer's
// share from a profile (car).
#pragma once

#include <vector>

#include "engine/layer_source.h"

namespace tierkv::engine {

// All of R's keys of a layer, requested at the start (by layer; impress
// requests those of the layers that fell back last time only).
struct H2oState : SourceState {
  explicit H2oState(int n_layers) : key_fetch(n_layers) {}
  std::vector<std::shared_ptr<Fetch>> key_fetch;
};

// Rows selected by H2O's scores over all of R's keys; a request's state is
// an H2oState (or a state derived from it, when a probe source falls back
// to H2O).
class H2oSource : public SelectiveSource {
 public:
  explicit H2oSource(const SourceDeps& deps) : d_(deps) {}
  // Requests every layer's keys at the start.
  std::unique_ptr<SourceState> Start(Request& rq) override;
  StartReads QueryFreeReads() const override;
  uint64_t IdealBytes(const LayerTrace& trace, uint64_t R) const override;  // every key, the kept values
  // Requests layer `layer`'s keys (all of R) on the load thread, into st.
  void FetchKeys(Request& rq, H2oState& st, int layer) const;
  // The H2O selection of one layer; `selected` (optional) gets the union of
  // the heads' sets.
  Status Select(Request& rq, LayerWork& work, LayerPrefix* prefix,
                std::vector<int32_t>* selected) const;

 protected:
  Status SupplyLayer(Request& rq, LayerWork& work, LayerPrefix* prefix) override {
    return Select(rq, work, prefix, nullptr);
  }

 private:
  // All of R's keys of the layer: fetched at the start, or read now into *own.
  Result<const std::string*> Keys(Request& rq, LayerWork& work, std::string* own) const;
  size_t KeepCount(const Request& rq, int layer) const;
  SourceDeps d_;
};

}  // namespace tierkv::engine

// as-like (AttentionStore): every row of R, each layer's whole records read
// on the load thread from the request's start and consumed in layer order.
#pragma once

#include "engine/layer_source.h"

namespace tierkv::engine {

class AllRowsSource : public LayerSource {
 public:
  explicit AllRowsSource(const SourceDeps& deps) : d_(deps) {}
  void Start(Request& rq) override;
  StartReads QueryFreeReads() const override;
  Status Supply(Request& rq, const LayerView& view, LayerPrefix* prefix, LayerTrace* trace) override;

 private:
  SourceDeps d_;
};

}  // namespace tierkv::engine

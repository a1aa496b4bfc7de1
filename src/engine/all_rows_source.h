// as-like (AttentionStore): every row of R, each layer's whole records read
// on the load thread from the request's start and consumed in layer order.
#pragma once

#include "engine/layer_source.h"

namespace tierkv::engine {

// The LayerRead of a whole layer: rows [0, R), K into f.k and V into f.v.
Status ReadWholeRows(PooledReader& reader, const store::LookupResult& m, size_t R, int layer, Fetch& f,
                     IoCounts* io);
// Hands the R rows of k and v (token-major, row_bytes each) to the attention.
void WholeRowsPrefix(const ModelConfig& c, size_t R, const std::string& k, const std::string& v,
                     LayerPrefix* prefix);

// Every layer's rows, read whole from the request's start.
struct AllRowsState final : SourceState {
  explicit AllRowsState(int n_layers) : whole(n_layers) {}
  std::vector<std::shared_ptr<Fetch>> whole;  // by layer
  Fetch* WholeLayer(int l) const override { return whole[l].get(); }
};

class AllRowsSource : public LayerSource {
 public:
  explicit AllRowsSource(const SourceDeps& deps) : d_(deps) {}
  std::unique_ptr<SourceState> Start(Request& rq) override;
  StartReads QueryFreeReads() const override;
  uint64_t IdealBytes(const LayerTrace& trace, uint64_t R) const override;  // every row's K and V
  Status Supply(Request& rq, const LayerView& view, LayerPrefix* prefix, LayerTrace* trace) override;

 private:
  SourceDeps d_;
};

}  // namespace tierkv::engine

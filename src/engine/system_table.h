// The systems of the papers as rows of one table (docs/systems.md): what a
// system does is read from its row, never from its name. Adding a system is
// a row in system_table.cc and its name in tierkv::System; one that selects
// rows differently brings its LayerSource (a file pair, layer_source.h),
// named by the row's `make_source`.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "cache/policy.h"
#include "tierkv/engine.h"

namespace tierkv::engine {

class LayerSource;
struct SourceDeps;
// Builds a row's layer source (SourceOf<S> in layer_source.h).
using MakeSourceFn = std::unique_ptr<LayerSource> (*)(const SourceDeps&);

// Which prefix rows a layer's attention gets.
enum class Selection {
  kNone,        // no reuse: everything is computed
  kAllRows,     // every row of R, loaded per layer from the request's start (AttentionStore)
  kH2o,         // all of R's keys, each KV head's H2O top-k, only those rows' values
  kProbeHeads,  // probe heads' keys decide a shared set (IMPRESS 4.3), H2O where they disagree
};

// Where a layer's share of R (its retention) comes from.
enum class RetentionFrom {
  kUniform,  // the request's retention, every layer alike
  kProfile,  // CaR's sparsity profile: denser layers keep more
};

struct SystemRow {
  System system;
  std::string_view name;
  Selection selection;
  RetentionFrom retention;
  bool reports_importance;  // feeds KV reordering (IMPRESS 4.4.1)
  // Stores new rows in the storing request's importance order too (a copy,
  // as reordering writes; CaR III-D decides at store time as well).
  bool orders_at_store;
  bool speculates;          // reads layer l's set for layer l+1 ahead (SPEC)
  bool score_events;        // raises the scheduler's score events in the pools (CaR III-B3)
  cache::PolicyKind default_policy;
  // Where its layers' prefix rows come from; null for a system that reuses
  // nothing.
  MakeSourceFn make_source;

  bool reuses() const { return selection != Selection::kNone; }
  // Reads some rows of each chunk layer (whole records otherwise).
  bool selective() const { return selection == Selection::kH2o || selection == Selection::kProbeHeads; }
};

// The row of `s`.
const SystemRow& RowOf(System s);
// Every row, in the table's order.
std::span<const SystemRow> SystemTable();

}  // namespace tierkv::engine

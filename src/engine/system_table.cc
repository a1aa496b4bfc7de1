#include "engine/system_table.h"

#include <string>
#include <vector>

#include "engine/all_rows_source.h"
#include "engine/h2o_source.h"
#include "engine/probe_source.h"
#include "engine/speculation.h"

namespace tierkv::engine {
namespace {

using cache::PolicyKind;

// One row per system, every field named (system_table.h says what each means).
constexpr SystemRow kTable[] = {
    {.system = System::kRecompute, .name = "recompute", .selection = Selection::kNone,
     .retention = RetentionFrom::kUniform, .reports_importance = false, .orders_at_store = false,
     .speculates = false, .score_events = false, .default_policy = PolicyKind::kLru,
     .make_source = nullptr},
    {.system = System::kAsLike, .name = "as-like", .selection = Selection::kAllRows,
     .retention = RetentionFrom::kUniform, .reports_importance = false, .orders_at_store = false,
     .speculates = false, .score_events = false, .default_policy = PolicyKind::kLru,
     .make_source = &SourceOf<AllRowsSource>},
    {.system = System::kAsH2oLru, .name = "as-h2o-lru", .selection = Selection::kH2o,
     .retention = RetentionFrom::kUniform, .reports_importance = false, .orders_at_store = false,
     .speculates = false, .score_events = false, .default_policy = PolicyKind::kLru,
     .make_source = &SourceOf<H2oSource>},
    {.system = System::kAsH2oLfu, .name = "as-h2o-lfu", .selection = Selection::kH2o,
     .retention = RetentionFrom::kUniform, .reports_importance = false, .orders_at_store = false,
     .speculates = false, .score_events = false, .default_policy = PolicyKind::kLfu,
     .make_source = &SourceOf<H2oSource>},
    {.system = System::kImpress, .name = "impress", .selection = Selection::kProbeHeads,
     .retention = RetentionFrom::kUniform, .reports_importance = true, .orders_at_store = true,
     .speculates = false, .score_events = false, .default_policy = PolicyKind::kScore,
     .make_source = &SourceOf<ProbeSource>},
    {.system = System::kImpressItf, .name = "impress-itf", .selection = Selection::kProbeHeads,
     .retention = RetentionFrom::kUniform, .reports_importance = false, .orders_at_store = false,
     .speculates = false, .score_events = false, .default_policy = PolicyKind::kLru,
     .make_source = &SourceOf<ProbeSource>},
    {.system = System::kImpressRo, .name = "impress-ro", .selection = Selection::kProbeHeads,
     .retention = RetentionFrom::kUniform, .reports_importance = true, .orders_at_store = true,
     .speculates = false, .score_events = false, .default_policy = PolicyKind::kLru,
     .make_source = &SourceOf<ProbeSource>},
    {.system = System::kSpec, .name = "spec", .selection = Selection::kProbeHeads,
     .retention = RetentionFrom::kUniform, .reports_importance = true, .orders_at_store = true,
     .speculates = true, .score_events = false, .default_policy = PolicyKind::kScore,
     .make_source = &SourceOf<SpeculatingSource>},
    {.system = System::kCar, .name = "car", .selection = Selection::kH2o,
     .retention = RetentionFrom::kProfile, .reports_importance = false, .orders_at_store = true,
     .speculates = false, .score_events = true, .default_policy = PolicyKind::kCar,
     .make_source = &SourceOf<H2oSource>},
};

// RowOf indexes the table by the enum's value.
constexpr bool TableMatchesEnum() {
  for (size_t i = 0; i < std::size(kTable); ++i) {
    if (static_cast<size_t>(kTable[i].system) != i) return false;
  }
  return true;
}
static_assert(TableMatchesEnum(), "one row per System, in enum order");

}  // namespace

const SystemRow& RowOf(System s) { return kTable[static_cast<size_t>(s)]; }

std::span<const SystemRow> SystemTable() { return kTable; }

std::span<const System> AllSystems() {
  static const std::vector<System> all = [] {
    std::vector<System> v;
    for (const SystemRow& row : kTable) v.push_back(row.system);
    return v;
  }();
  return all;
}

std::string_view SystemName(System s) { return RowOf(s).name; }

SystemTraits TraitsOf(System s) {
  const SystemRow& r = RowOf(s);
  return SystemTraits{r.reuses(), r.selective(), r.retention == RetentionFrom::kProfile,
                      r.speculates, r.reports_importance};
}

Result<System> ParseSystem(std::string_view name) {
  std::string known;
  for (const SystemRow& row : kTable) {
    if (name == row.name) return row.system;
    known += (known.empty() ? "" : ", ") + std::string(row.name);
  }
  return Status::InvalidArgument("unknown system '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace tierkv::engine

#include "engine/system_table.h"

#include <string>
#include <vector>

namespace tierkv::engine {
namespace {

using cache::PolicyKind;
constexpr bool kYes = true, kNo = false;

// system, name, selection, retention, reports importance, orders at store,
// speculates, score events, default pool policy
constexpr SystemRow kTable[] = {
    {System::kRecompute, "recompute", Selection::kNone, RetentionFrom::kUniform, kNo, kNo, kNo, kNo,
     PolicyKind::kLru},
    {System::kAsLike, "as-like", Selection::kAllRows, RetentionFrom::kUniform, kNo, kNo, kNo, kNo,
     PolicyKind::kLru},
    {System::kAsH2oLru, "as-h2o-lru", Selection::kH2o, RetentionFrom::kUniform, kNo, kNo, kNo, kNo,
     PolicyKind::kLru},
    {System::kAsH2oLfu, "as-h2o-lfu", Selection::kH2o, RetentionFrom::kUniform, kNo, kNo, kNo, kNo,
     PolicyKind::kLfu},
    {System::kImpress, "impress", Selection::kProbeHeads, RetentionFrom::kUniform, kYes, kYes, kNo, kNo,
     PolicyKind::kScore},
    {System::kImpressItf, "impress-itf", Selection::kProbeHeads, RetentionFrom::kUniform, kNo, kNo, kNo,
     kNo, PolicyKind::kLru},
    {System::kImpressRo, "impress-ro", Selection::kProbeHeads, RetentionFrom::kUniform, kYes, kYes, kNo,
     kNo, PolicyKind::kLru},
    {System::kSpec, "spec", Selection::kProbeHeads, RetentionFrom::kUniform, kYes, kYes, kYes, kNo,
     PolicyKind::kScore},
    {System::kCar, "car", Selection::kH2o, RetentionFrom::kProfile, kNo, kYes, kNo, kYes,
     PolicyKind::kCar},
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

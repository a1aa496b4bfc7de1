#include "engine/options.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "store/format.h"

namespace tierkv::engine {
namespace {

// The named pool policies and the cache's kinds, both ways.
constexpr std::pair<PoolPolicy, cache::PolicyKind> kPolicies[] = {
    {PoolPolicy::kLru, cache::PolicyKind::kLru},
    {PoolPolicy::kLfu, cache::PolicyKind::kLfu},
    {PoolPolicy::kScore, cache::PolicyKind::kScore},
    {PoolPolicy::kCar, cache::PolicyKind::kCar},
};

// A decimal number of at most 4 digits from 0 to `max` (the flags'
// small counts: block:N, --score-pool), or nothing.
std::optional<uint32_t> SmallNumber(std::string_view n, uint32_t max) {
  if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string_view::npos) return {};
  const int v = std::stoi(std::string(n));
  if (v > static_cast<int>(max)) return {};
  return static_cast<uint32_t>(v);
}

}  // namespace

select::Aggregation ToSelect(Aggregation a) {
  return a == Aggregation::kVote ? select::Aggregation::kVote : select::Aggregation::kSum;
}

std::string_view AggregationName(Aggregation a) { return select::AggregationName(ToSelect(a)); }

Result<Aggregation> ParseAggregation(std::string_view name) {
  ASSIGN_OR_RETURN(select::Aggregation a, select::ParseAggregation(name));
  return a == select::Aggregation::kVote ? Aggregation::kVote : Aggregation::kSum;
}

cache::PolicyKind PolicyFor(PoolPolicy p, const SystemRow& row) {
  for (const auto& [policy, kind] : kPolicies) {
    if (policy == p) return kind;
  }
  return row.default_policy;  // kSystemDefault
}

std::string_view PoolPolicyName(PoolPolicy p) {
  for (const auto& [policy, kind] : kPolicies) {
    if (policy == p) return cache::PolicyName(kind);
  }
  return "default";
}

Result<PoolPolicy> ParsePoolPolicy(std::string_view name) {
  ASSIGN_OR_RETURN(cache::PolicyKind kind, cache::ParsePolicy(name));
  for (const auto& [policy, k] : kPolicies) {
    if (k == kind) return policy;
  }
  return Status::InvalidArgument("pool policy '" + std::string(name) + "' has no engine option");
}

std::string SelectionUnitName(SelectionUnit u) {
  switch (u.granularity) {
    case Granularity::kToken: return "token";
    case Granularity::kPage: return "page";
    case Granularity::kBlock: return "block:" + std::to_string(u.block_tokens);
    case Granularity::kAuto: return "auto";
  }
  return "?";
}

SelectionUnit ResolveUnit(SelectionUnit u, double retention, size_t reused_rows, uint32_t row_bytes) {
  if (u.granularity != Granularity::kAuto) return u;
  // At retention 0.25 blocks of 64 tokens agree with recompute as well as
  // pages (top-1 0.927 / 0.925 on 2,700-token prefixes) and are read in
  // fewer, larger I/Os (TTFT 0.68× as-like's against 0.82× mostly on disk);
  // at 0.5 they lose 0.7 points to pages (0.949 / 0.956). docs/systems.md,
  // "Selection units". A layer keeps at most one unit more than asked: on a
  // short prefix smaller blocks keep that within an eighth.
  const SelectionUnit page{Granularity::kPage};
  if (retention > kAutoBlockRetention) return page;
  const size_t page_rows = RowsPerUnit(page, row_bytes);
  const double keep = retention * static_cast<double>(reused_rows);
  uint32_t b = kAutoBlockTokens;
  while (b > page_rows && keep < static_cast<double>(kAutoMinUnits) * b) b /= 2;
  if (b <= page_rows) return page;
  return SelectionUnit{Granularity::kBlock, b};
}

double ProbeRecallFor(double retention) {
  // A shared set keeps less of each head's own mass the fewer rows it
  // keeps (the default model's weakest layers: 0.63 at 0.125, 0.74 at 0.25,
  // 0.77 at 0.3, 0.82 at 0.4, 0.86 at 0.5), and a user who asks for more
  // rows asks for fidelity: the target rises with the retention so that
  // at 0.5 the layers whose heads disagree most fall back, and below 0.5
  // none does by a step of the retention (docs/systems.md, "The probes'
  // target and fallback").
  return std::min(0.9, 0.5 + 0.8 * retention);
}

namespace {

// "auto" (nullopt) or a number in [lo, hi]; `what` names the value in the error.
Result<std::optional<double>> ParseAutoOrNumber(std::string_view text, double lo, double hi,
                                                const std::string& what) {
  if (text == "auto") return std::optional<double>();
  const std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !(v >= lo && v <= hi)) {
    char range[64];
    std::snprintf(range, sizeof range, "[%g, %g]", lo, hi);
    return Status::InvalidArgument(what + " '" + s + "': expected auto or a number in " + range);
  }
  return std::optional<double>(v);
}

}  // namespace

Result<double> ParseProbeRecall(std::string_view text) {
  ASSIGN_OR_RETURN(std::optional<double> v, ParseAutoOrNumber(text, 0, 1, "probe recall"));
  return v.value_or(kProbeRecallAuto);
}

Result<std::optional<double>> ParseAlpha(std::string_view text) {
  return ParseAutoOrNumber(text, 0, 16, "--alpha");
}

size_t RowsPerUnit(const SelectionUnit& u, uint32_t row_bytes) {
  switch (u.granularity) {
    case Granularity::kToken: return 1;
    case Granularity::kPage: return std::max<size_t>(1, store::kBlockSize / std::max<uint32_t>(1, row_bytes));
    case Granularity::kBlock: return u.block_tokens;
    case Granularity::kAuto: break;  // callers resolve it first (ResolveUnit)
  }
  return 1;
}

Result<SelectionUnit> ParseSelectionUnit(std::string_view name) {
  if (name == "token") return SelectionUnit{Granularity::kToken};
  if (name == "page") return SelectionUnit{Granularity::kPage};
  if (name == "auto") return SelectionUnit{Granularity::kAuto};
  const std::string_view block = "block:";
  if (name.substr(0, block.size()) == block) {
    const auto v = SmallNumber(name.substr(block.size()), 4096);
    if (v && *v >= 1) return SelectionUnit{Granularity::kBlock, *v};
  }
  return Status::InvalidArgument("selection unit '" + std::string(name) +
                                 "' (known: auto, token, page, block:N with N in 1..4096)");
}

Result<ScorePool> ParseScorePool(std::string_view text) {
  const auto bad = [&text] {
    return Status::InvalidArgument("score pool '" + std::string(text) + "' (known: off, N or B:A, each 0.." +
                                   std::to_string(kMaxScorePool) + ")");
  };
  if (text == "off") return ScorePool{};
  const auto number = [](std::string_view n) { return SmallNumber(n, kMaxScorePool); };
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) {
    const auto n = number(text);
    if (!n) return bad();
    return ScorePool{*n, *n};
  }
  const auto before = number(text.substr(0, colon)), after = number(text.substr(colon + 1));
  if (!before || !after) return bad();
  return ScorePool{*before, *after};
}

std::string ScorePoolName(ScorePool p) {
  if (p.before == 0 && p.after == 0) return "off";
  if (p.before == p.after) return std::to_string(p.before);
  return std::to_string(p.before) + ":" + std::to_string(p.after);
}

std::string_view StoreOrderName(StoreOrder o) {
  switch (o) {
    case StoreOrder::kSystem: return "system";
    case StoreOrder::kOn: return "on";
    case StoreOrder::kOff: return "off";
  }
  return "?";
}

Result<StoreOrder> ParseStoreOrder(std::string_view name) {
  for (StoreOrder o : {StoreOrder::kSystem, StoreOrder::kOn, StoreOrder::kOff}) {
    if (name == StoreOrderName(o)) return o;
  }
  return Status::InvalidArgument("store order '" + std::string(name) + "' (known: system, on, off)");
}

std::string_view ProbeFallbackName(ProbeFallback f) {
  return f == ProbeFallback::kH2o ? "h2o" : "all";
}

Result<ProbeFallback> ParseProbeFallback(std::string_view name) {
  for (ProbeFallback f : {ProbeFallback::kAllRows, ProbeFallback::kH2o}) {
    if (name == ProbeFallbackName(f)) return f;
  }
  return Status::InvalidArgument("probe fallback '" + std::string(name) + "' (known: all, h2o)");
}

std::string_view SpecPredictorName(SpecPredictor p) {
  switch (p) {
    case SpecPredictor::kLayerSet: return "set";
    case SpecPredictor::kQueries: return "queries";
  }
  return "?";
}

Result<SpecPredictor> ParseSpecPredictor(std::string_view name) {
  for (SpecPredictor p : {SpecPredictor::kLayerSet, SpecPredictor::kQueries}) {
    if (name == SpecPredictorName(p)) return p;
  }
  return Status::InvalidArgument("spec predictor '" + std::string(name) + "' (known: set, queries)");
}

Status EngineOptions::Validate() const {
  RETURN_IF_ERROR(remote.Validate());
  if (unit.granularity == Granularity::kBlock && (unit.block_tokens < 1 || unit.block_tokens > 4096)) {
    return Status::InvalidArgument("unit: block_tokens " + std::to_string(unit.block_tokens) +
                                   " is outside 1..4096");
  }
  if (score_pool.before > kMaxScorePool || score_pool.after > kMaxScorePool) {
    return Status::InvalidArgument("score_pool " + ScorePoolName(score_pool) + " is above " +
                                   std::to_string(kMaxScorePool) + " on a side");
  }
  if (!(retention > 0 && retention <= 1)) {
    return Status::InvalidArgument("retention " + std::to_string(retention) + " is outside (0, 1]");
  }
  if (chunk_tokens < 1 || chunk_tokens > 4096) {
    return Status::InvalidArgument("chunk_tokens " + std::to_string(chunk_tokens) +
                                   " is outside 1..4096");
  }
  if (!(alpha >= 0 && alpha <= 16)) {
    return Status::InvalidArgument("alpha " + std::to_string(alpha) + " is outside [0, 16]");
  }
  if (probe_recall != kProbeRecallAuto && !(probe_recall >= 0 && probe_recall <= 1)) {
    return Status::InvalidArgument("probe_recall " + std::to_string(probe_recall) + " is outside [0, 1]");
  }
  if (!(spec_min_recall >= 0 && spec_min_recall <= 1)) {
    return Status::InvalidArgument("spec_min_recall " + std::to_string(spec_min_recall) +
                                   " is outside [0, 1]");
  }
  if (RowOf(system).reuses() && cache_dir.empty()) {
    return Status::InvalidArgument("system " + std::string(SystemName(system)) +
                                   " needs a cache directory (cache_dir)");
  }
  return Status::Ok();
}

double RequestStats::device_hit_ratio() const {
  const uint64_t all = device_hits + host_hits + disk_reads;
  return all == 0 ? 0.0 : static_cast<double>(device_hits) / static_cast<double>(all);
}

}  // namespace tierkv::engine

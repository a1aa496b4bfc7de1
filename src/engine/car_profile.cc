#include "engine/car_profile.h"

#include <nlohmann/json.hpp>

#include "engine/profile_file.h"
#include "select/profile.h"
#include "tierkv/filesystem.h"
#include "tierkv/logging.h"

namespace tierkv::engine {

Result<std::vector<double>> CarProfile::Parse(const std::string& text) const {
  ASSIGN_OR_RETURN(nlohmann::json j, ParseProfileFile(text, fingerprint_));
  if (!j.contains("sparsity") || !j["sparsity"].is_array() ||
      j["sparsity"].size() != static_cast<size_t>(layers_)) {
    return Status::InvalidArgument("field 'sparsity' is not an array of " +
                                   std::to_string(layers_) + " numbers");
  }
  std::vector<double> s;
  for (const auto& x : j["sparsity"]) {
    if (!x.is_number() || !(x.get<double>() >= 0 && x.get<double>() <= 1)) {
      return Status::InvalidArgument("field 'sparsity' holds a value outside [0, 1]");
    }
    s.push_back(x.get<double>());
  }
  return s;
}

void CarProfile::Use(std::vector<double> sparsity) {
  std::vector<double> r = select::LayerRetention(sparsity, retention_);
  MutexLock l(&mu_);
  layer_retention_ = std::move(r);
  sparsity_ = std::move(sparsity);
}

void CarProfile::Load() {
  auto text = ReadFileToString(FileSystem::Default(), path_);
  if (!text.ok()) return;
  auto s = Parse(*text);
  if (s.ok()) {
    Use(std::move(s).value());
    return;
  }
  TIERKV_LOG(kWarn) << "car: ignoring " << path_ << ": " << s.status().message()
                    << "; the profile is measured again";
}

Result<std::vector<double>> CarProfile::Measure(const Model& model,
                                                std::span<const std::vector<int32_t>> prompts) {
  if (prompts.empty()) return Status::InvalidArgument("profile: no profiling prompts");
  std::vector<double> sum(layers_, 0.0);
  size_t used = 0, tokens = 0;
  for (const auto& p : prompts) {
    if (p.empty()) continue;
    PrefillOptions po;
    po.attention_sparsity = true;
    po.logits = LogitsMode::kNone;
    ASSIGN_OR_RETURN(PrefillResult r, model.Prefill(p, po));
    for (int l = 0; l < layers_; ++l) sum[l] += r.sparsity[l];
    ++used;
    tokens += p.size();
  }
  if (used == 0) return Status::InvalidArgument("profile: every profiling prompt is empty");
  for (double& x : sum) x /= static_cast<double>(used);
  nlohmann::json j;
  j["fingerprint"] = fingerprint_;
  j["prompts"] = used;
  j["tokens"] = tokens;
  j["sparsity"] = sum;
  Status saved = WriteFileAtomically(FileSystem::Default(), path_, j.dump(1));
  if (!saved.ok()) {
    // The profile still serves this engine; the next one measures again.
    TIERKV_LOG(kWarn) << "car: saving the sparsity profile: " << saved.ToString();
  }
  Use(sum);
  return sum;
}

std::vector<double> CarProfile::LayerRetention() const {
  MutexLock l(&mu_);
  return layer_retention_;
}

std::vector<double> CarProfile::LayerRetention(double retention) const {
  MutexLock l(&mu_);
  if (sparsity_.empty()) return {};
  return select::LayerRetention(sparsity_, retention);
}

}  // namespace tierkv::engine

// CaR's sparsity profile (III-D): each layer's share of attention weights
// below 1% of their row's maximum, measured on profiling prompts once per
// model and turned into per-layer retention (denser layers keep more). Saved
// beside the store as kFileName with the store's fingerprint: a missing,
// damaged or foreign file is measured again on first use. Thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tierkv/model.h"
#include "tierkv/status.h"
#include "tierkv/mutex.h"

namespace tierkv::engine {

class CarProfile {
 public:
  static constexpr const char* kFileName = "car-profile.json";

  CarProfile(std::string cache_dir, uint64_t fingerprint, int layers, double retention)
      : path_(std::move(cache_dir) + "/" + kFileName), fingerprint_(fingerprint), layers_(layers),
        retention_(retention) {}

  // Uses the saved profile if it is this model's; otherwise logs why not
  // and stays empty.
  void Load();
  // Measures the profile on `prompts` (empty ones skipped), uses it and
  // saves it (a failed save is logged: the next engine measures again).
  // Returns the sparsity per layer.
  Result<std::vector<double>> Measure(const Model& model,
                                      std::span<const std::vector<int32_t>> prompts);
  // Per-layer retention (empty until loaded or measured): for the engine's
  // retention, or for `retention` (a request's own).
  std::vector<double> LayerRetention() const;
  std::vector<double> LayerRetention(double retention) const;

 private:
  // The sparsity of a profile file's text, or what is wrong with it.
  Result<std::vector<double>> Parse(const std::string& text) const;
  void Use(std::vector<double> sparsity);

  const std::string path_;
  const uint64_t fingerprint_;
  const int layers_;
  const double retention_;
  mutable Mutex mu_;
  std::vector<double> layer_retention_ TIERKV_GUARDED_BY(mu_);
  std::vector<double> sparsity_ TIERKV_GUARDED_BY(mu_);
};

}  // namespace tierkv::engine

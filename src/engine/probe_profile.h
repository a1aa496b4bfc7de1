// The probe threshold fitted to the model (`--alpha auto`, select/probe_fit.h):
// per layer, samples of the probes' Jaccard and their shared set's recall
// measured on profiling prompts once per model and retention, and the
// threshold fitted from them for a target recall. Saved beside the store as
// kFileName with the store's fingerprint and the retention: a missing,
// damaged, foreign or other-retention file is measured again on first use.
// Thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "select/probe_fit.h"
#include "tierkv/engine.h"
#include "tierkv/model.h"
#include "tierkv/mutex.h"
#include "tierkv/status.h"

namespace tierkv::engine {

class ProbeProfile {
 public:
  static constexpr const char* kFileName = "probe-profile.json";
  // The query of a profiling prompt: its last tokens score the rows before.
  static constexpr size_t kQueryTokens = 64;
  // What a sample's recall measures (select::HeadMassRecall), saved with
  // the samples: a file measured otherwise is measured again.
  static constexpr const char* kRecallMeasure = "head-mass";

  ProbeProfile(std::string cache_dir, uint64_t fingerprint, const ModelConfig& c, double retention,
               double target_recall)
      : path_(std::move(cache_dir) + "/" + kFileName), fingerprint_(fingerprint), c_(c),
        retention_(retention), target_(target_recall) {}

  // Uses the saved profile if it is this model's at this retention;
  // otherwise logs why not and stays empty.
  void Load();
  // Whether a prompt of `n` tokens can be profiled on: at least twice
  // kQueryTokens, within the model's context (0: no limit).
  static bool Usable(size_t n, size_t context) { return n >= 2 * kQueryTokens && (context == 0 || n <= context); }
  // Measures on `prompts` (the Usable ones), fits, uses and saves.
  // NotFound when none is usable.
  Result<std::vector<ProbeFit>> Measure(const Model& model, std::span<const std::vector<int32_t>> prompts);
  // Whether a profile is loaded or measured.
  bool Fitted() const;
  // Layer `layer`'s threshold; -1 (IMPRESS's j^alpha) when not fitted.
  double Threshold(int layer) const;
  std::vector<ProbeFit> Fits() const;

 private:
  using Samples = std::vector<std::vector<select::ProbeSample>>;  // per layer
  Status Sample(const Model& model, const std::vector<int32_t>& prompt, Samples* out) const;
  Result<Samples> Parse(const std::string& text) const;
  void Use(const Samples& samples);

  const std::string path_;
  const uint64_t fingerprint_;
  const ModelConfig c_;
  const double retention_, target_;
  mutable Mutex mu_;
  std::vector<ProbeFit> fits_ TIERKV_GUARDED_BY(mu_);
};

}  // namespace tierkv::engine

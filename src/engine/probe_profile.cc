#include "engine/probe_profile.h"

#include <nlohmann/json.hpp>

#include "engine/profile_file.h"
#include "engine/head_scores.h"
#include "select/identify.h"
#include "select/importance.h"
#include "tierkv/filesystem.h"
#include "tierkv/logging.h"

namespace tierkv::engine {

Status ProbeProfile::Sample(const Model& model, const std::vector<int32_t>& p, Samples* out) const {
  const size_t s = p.size() - kQueryTokens;  // the prefix the query attends to
  const int H = c_.n_kv_heads, P = select::ProbeHeads(H);
  const size_t kvd = static_cast<size_t>(c_.kv_dim()), hb = static_cast<size_t>(c_.head_dim()) * 2;
  PrefillOptions pre;
  pre.capture_kv = true;
  pre.kv_dtype = KvDType::kF16;
  pre.logits = LogitsMode::kNone;
  ASSIGN_OR_RETURN(PrefillResult prefix, model.Prefill(std::span(p).first(s), pre));
  select::IdentifyOptions io;
  io.retention = retention_;
  PrefillOptions q;
  q.start_pos = static_cast<int>(s);
  q.logits = LogitsMode::kNone;
  q.before_attention = [&](const LayerView& v, LayerPrefix* rows) -> Status {
    const auto& kv = prefix.kv[v.layer];
    const auto* keys = reinterpret_cast<const uint16_t*>(kv.k.data());
    const std::vector<std::vector<float>> all = AllHeadScores(v, c_, H, keys, kvd, s);
    const size_t k = select::CountForFraction(s, retention_);
    const std::vector<std::vector<float>> probes(all.begin(), all.begin() + P);
    const select::ProbeDecision d = select::DecideWithProbes(probes, io);
    const std::vector<int32_t> shared = select::SelectBySummedScores(probes, k);
    (*out)[v.layer].push_back({d.jaccard, select::HeadMassRecall(shared, all, k)});
    rows->heads.resize(H);
    for (int h = 0; h < H; ++h) {
      rows->heads[h] = KvRows{kv.k.data() + h * hb, kv.v.data() + h * hb, KvDType::kF16, s, kvd, kvd, nullptr};
    }
    return Status::Ok();
  };
  return model.Prefill(std::span(p).subspan(s), q).status();
}

Result<std::vector<ProbeFit>> ProbeProfile::Measure(const Model& model,
                                                    std::span<const std::vector<int32_t>> prompts) {
  Samples samples(c_.n_layers);
  size_t used = 0;
  const size_t context = static_cast<size_t>(model.config().context_length);
  for (const auto& p : prompts) {
    if (!Usable(p.size(), context)) continue;
    RETURN_IF_ERROR(Sample(model, p, &samples));
    ++used;
  }
  if (used == 0) {
    return Status::NotFound("probe profile: no profiling prompt of " + std::to_string(2 * kQueryTokens) +
                            " tokens or more within the model's context of " + std::to_string(context));
  }
  nlohmann::json j;
  j["fingerprint"] = fingerprint_;
  j["retention"] = retention_;
  j["recall"] = kRecallMeasure;
  j["prompts"] = used;
  for (const auto& layer : samples) {
    nlohmann::json l = nlohmann::json::array();
    for (const auto& x : layer) l.push_back({x.jaccard, x.recall});
    j["samples"].push_back(l);
  }
  Status saved = WriteFileAtomically(FileSystem::Default(), path_, j.dump(1));
  if (!saved.ok()) {
    // The profile still serves this engine; the next one measures again.
    TIERKV_LOG(kWarn) << "probe profile: saving: " << saved.ToString();
  }
  Use(samples);
  return Fits();
}

Result<ProbeProfile::Samples> ProbeProfile::Parse(const std::string& text) const {
  ASSIGN_OR_RETURN(nlohmann::json j, ParseProfileFile(text, fingerprint_));
  if (!j.contains("retention") || !j["retention"].is_number() || j["retention"].get<double>() != retention_) {
    return Status::InvalidArgument("field 'retention' is not this engine's " + std::to_string(retention_));
  }
  if (!j.contains("recall") || j["recall"] != kRecallMeasure) {
    // An earlier measure (the heads' summed mass) fits other thresholds.
    return Status::InvalidArgument(std::string("field 'recall' is not '") + kRecallMeasure + "'");
  }
  if (!j.contains("samples") || !j["samples"].is_array() || j["samples"].size() != static_cast<size_t>(c_.n_layers)) {
    return Status::InvalidArgument("field 'samples' is not an array of " + std::to_string(c_.n_layers) + " layers");
  }
  Samples out(c_.n_layers);
  for (int l = 0; l < c_.n_layers; ++l) {
    for (const auto& x : j["samples"][l]) {
      if (!x.is_array() || x.size() != 2 || !x[0].is_number() || !x[1].is_number() ||
          !(x[0].get<double>() >= 0 && x[0].get<double>() <= 1) ||
          !(x[1].get<double>() >= 0 && x[1].get<double>() <= 1)) {
        return Status::InvalidArgument("field 'samples' layer " + std::to_string(l) +
                                       " holds an entry that is not [jaccard, recall] in [0, 1]");
      }
      out[l].push_back({x[0].get<double>(), x[1].get<double>()});
    }
  }
  return out;
}

void ProbeProfile::Load() {
  auto text = ReadFileToString(FileSystem::Default(), path_);
  if (!text.ok()) return;
  auto s = Parse(*text);
  if (s.ok()) {
    Use(*s);
    return;
  }
  TIERKV_LOG(kWarn) << "probe profile: ignoring " << path_ << ": " << s.status().message()
                    << "; the profile is measured again";
}

void ProbeProfile::Use(const Samples& samples) {
  std::vector<ProbeFit> fits;
  for (const auto& layer : samples) {
    ProbeFit f;
    f.threshold = select::FitThreshold(layer, target_);
    size_t n = 0;
    for (const auto& x : layer) {
      f.recall += x.recall;
      if (x.jaccard >= f.threshold) {
        ++n;
        f.decided_recall += x.recall;
      }
    }
    if (!layer.empty()) f.recall /= static_cast<double>(layer.size());
    if (n > 0) f.decided_recall /= static_cast<double>(n);
    f.decided = layer.empty() ? 0 : static_cast<double>(n) / static_cast<double>(layer.size());
    fits.push_back(f);
  }
  MutexLock l(&mu_);
  fits_ = std::move(fits);
}

bool ProbeProfile::Fitted() const {
  MutexLock l(&mu_);
  return !fits_.empty();
}

double ProbeProfile::Threshold(int layer) const {
  MutexLock l(&mu_);
  return layer >= 0 && layer < static_cast<int>(fits_.size()) ? fits_[layer].threshold : -1;
}

std::vector<ProbeFit> ProbeProfile::Fits() const {
  MutexLock l(&mu_);
  return fits_;
}

}  // namespace tierkv::engine

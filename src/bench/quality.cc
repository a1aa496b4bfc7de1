// The harness's quality pass: fidelity, exactness and task accuracy.
#include "bench/quality.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "tierkv/fidelity.h"

namespace tierkv::bench {

namespace {

using nlohmann::json;

// What one serve of the quality pass asks: the query alone (choice -1) or
// the query followed by one choice; logits from the query's first token on.
struct Variant {
  size_t req = 0;
  int choice = -1;
  std::vector<int32_t> tokens;
  size_t from = 0;
};

std::vector<Variant> Variants(std::span<const TaskRequest> reqs) {
  std::vector<Variant> out;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const TaskRequest& r = reqs[i];
    const int n = r.choices.empty() ? 1 : static_cast<int>(r.choices.size());
    for (int c = 0; c < n; ++c) {
      Variant v;
      v.req = i;
      v.choice = r.choices.empty() ? -1 : c;
      v.tokens = r.Joined();
      if (v.choice >= 0) v.tokens.insert(v.tokens.end(), r.choices[c].begin(), r.choices[c].end());
      v.from = r.prefix.size();
      out.push_back(std::move(v));
    }
  }
  return out;
}

// The log-likelihood of a choice's tokens: row k of `logits` predicts the
// token after position from + k, so the choice's j-th token is predicted by
// row query_len - 1 + j.
double ChoiceLogLikelihood(std::span<const float> logits, size_t vocab, size_t query_len,
                           std::span<const int32_t> choice) {
  double sum = 0;
  for (size_t j = 0; j < choice.size(); ++j) {
    const auto row = logits.subspan((query_len - 1 + j) * vocab, vocab);
    sum += double(row[static_cast<size_t>(choice[j])]) - engine::LogSumExp(row);
  }
  return sum;
}

// Per request with choices: the index of the choice of highest likelihood
// (ties to the lower index), from each variant's logits.
class Picks {
 public:
  void Add(const Variant& v, const TaskRequest& r, std::span<const float> logits, size_t vocab) {
    if (v.choice < 0) return;
    const double ll = ChoiceLogLikelihood(logits, vocab, r.query.size(), r.choices[v.choice]);
    auto [it, first] = best_.try_emplace(v.req, v.choice, ll);
    if (!first && ll > it->second.second) it->second = {v.choice, ll};
  }
  int Of(size_t req) const {
    auto it = best_.find(req);
    return it == best_.end() ? -1 : it->second.first;
  }

 private:
  std::map<size_t, std::pair<int, double>> best_;  // request -> (choice, log-likelihood)
};

// Accuracy per task (requests with choices), against labels and recompute's picks.
json TaskAccuracy(std::span<const TaskRequest> reqs, const Picks& mine, const Picks& reference) {
  struct T {
    size_t questions = 0, labelled = 0, correct = 0, agree = 0;
  };
  std::map<std::string, T> tasks;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i].choices.empty()) continue;
    T& t = tasks[reqs[i].task.empty() ? "default" : reqs[i].task];
    ++t.questions;
    t.agree += mine.Of(i) == reference.Of(i);
    if (reqs[i].label >= 0) {
      ++t.labelled;
      t.correct += mine.Of(i) == reqs[i].label;
    }
  }
  json out = json::object();
  for (const auto& [name, t] : tasks) {
    out[name] = {{"questions", t.questions},
                 {"labelled", t.labelled},
                 {"accuracy", t.labelled ? json(double(t.correct) / double(t.labelled)) : json()},
                 {"agree_with_recompute", double(t.agree) / double(t.questions)}};
  }
  return out;
}

double MaxAbsDiff(std::span<const float> a, std::span<const float> b) {
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  if (a.size() != b.size()) m = std::numeric_limits<double>::infinity();
  return m;
}

// Every variant's logits with one engine (cold pools, nothing stored), and
// how many prefix tokens each reused.
struct Served {
  std::vector<std::vector<float>> logits;
  std::vector<size_t> reused;
};
Result<Served> ServeAll(engine::Engine& eng, const std::vector<Variant>& vs, const HarnessOptions& o,
                        const std::string& what) {
  Served out;
  for (size_t i = 0; i < vs.size(); ++i) {
    engine::ServeOptions so;
    so.store = false;
    so.logits_from = vs[i].from;
    ASSIGN_OR_RETURN(engine::ServeResult s, eng.Serve(vs[i].tokens, so));
    out.logits.push_back(std::move(s.logits));
    out.reused.push_back(s.stats.reused_tokens);
    if (o.progress) o.progress(what, i + 1, vs.size());
  }
  return out;
}

// One system's quality figures. Against as-like (when `exact` holds its
// logits) only the variants where both reused as many prefix tokens: as-like
// also reuses a prefix's last partial chunk, which the selective systems
// compute (their rows are whole chunks), so elsewhere the two computations
// differ by design.
json Compare(std::span<const TaskRequest> reqs, const std::vector<Variant>& vs, const Served& reference,
             const Served& got, const Served* exact, const Picks& ref_picks, size_t vocab) {
  engine::Fidelity fid;
  Picks picks;
  double vs_exact = 0, reused = 0;
  size_t compared = 0;
  for (size_t i = 0; i < vs.size(); ++i) {
    fid.Add(reference.logits[i], got.logits[i], vocab);
    picks.Add(vs[i], reqs[vs[i].req], got.logits[i], vocab);
    reused += static_cast<double>(got.reused[i]);
    if (exact && exact->reused[i] == got.reused[i]) {
      vs_exact = std::max(vs_exact, MaxAbsDiff(exact->logits[i], got.logits[i]));
      ++compared;
    }
  }
  json q = {{"rows", fid.rows},
            {"reused_tokens_mean", vs.empty() ? 0.0 : reused / static_cast<double>(vs.size())},
            {"top1_agree", fid.top1_agree()},
            {"kl_mean", fid.kl_mean()},
            {"max_abs_logit_diff", fid.max_abs_logit_diff},
            {"tasks", TaskAccuracy(reqs, picks, ref_picks)}};
  if (exact) {
    q["max_abs_logit_diff_vs_as_like"] = compared ? json(vs_exact) : json();  // null: nothing to compare
    q["compared_with_as_like"] = compared;  // of vs.size() serves
    q["serves"] = vs.size();
  }
  return q;
}

}  // namespace

struct QualityReference {
  size_t serves = 0;  // 0: not computed yet
  Served served;
  Picks picks;
};

std::shared_ptr<QualityReference> NewQualityReference() { return std::make_shared<QualityReference>(); }

namespace {

// Recompute's logits of every variant and its answers, into *ref.
Status ComputeReference(const Model& model, std::span<const TaskRequest> reqs, const std::vector<Variant>& vs,
                        const HarnessOptions& o, QualityReference* ref) {
  engine::EngineOptions ro;
  ro.system = engine::System::kRecompute;
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> rec, engine::Engine::Open(model, ro));
  ASSIGN_OR_RETURN(ref->served, ServeAll(*rec, vs, o, "quality: recompute"));
  const size_t vocab = static_cast<size_t>(model.config().vocab_size);
  for (size_t i = 0; i < vs.size(); ++i) ref->picks.Add(vs[i], reqs[vs[i].req], ref->served.logits[i], vocab);
  ref->serves = vs.size();
  return Status::Ok();
}

}  // namespace

Status AddQuality(const Model& model, std::span<const TaskRequest> reqs, const HarnessOptions& o, uint64_t stored,
                  json* per) {
  const std::vector<Variant> vs = Variants(reqs);
  const size_t vocab = static_cast<size_t>(model.config().vocab_size);
  const std::shared_ptr<QualityReference> ref = o.reference ? o.reference : NewQualityReference();
  if (ref->serves == 0) {
    RETURN_IF_ERROR(ComputeReference(model, reqs, vs, o, ref.get()));
  } else if (ref->serves != vs.size()) {
    return Status::InvalidArgument("quality reference: computed for " + std::to_string(ref->serves) +
                                   " serves, these requests make " + std::to_string(vs.size()));
  }
  // as-like's logits (fp16-KV reuse), the exact answer at retention 1.0:
  // served first so that every other system is compared with them.
  std::vector<engine::System> order = o.systems;
  std::stable_partition(order.begin(), order.end(), [](engine::System s) { return s == engine::System::kAsLike; });
  std::optional<Served> exact;
  for (engine::System sys : order) {
    const std::string name(engine::SystemName(sys));
    Served own;
    if (sys != engine::System::kRecompute) {
      ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> eng, engine::Engine::Open(model, o.EngineFor(sys, stored)));
      ASSIGN_OR_RETURN(own, ServeAll(*eng, vs, o, "quality: " + name));
    }
    const Served& got = sys == engine::System::kRecompute ? ref->served : own;
    const Served* against = sys == engine::System::kAsLike ? &got : (exact ? &*exact : nullptr);  // as-like: 0
    (*per)[name]["quality"] = Compare(reqs, vs, ref->served, got, against, ref->picks, vocab);
    if (sys == engine::System::kAsLike) exact = std::move(own);
  }
  return Status::Ok();
}

}  // namespace tierkv::bench

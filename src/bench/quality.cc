// The harness's quality pass: fidelity, exactness and task accuracy.
#include "bench/quality.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cctype>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>

#include "tierkv/fidelity.h"
#include "tierkv/generate.h"
#include "tierkv/sequence.h"
#include "tierkv/tools/latency.h"

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

// Every variant's logits with one engine (cold pools, nothing stored), how
// many prefix tokens each reused, its TTFT and disk reads, and for a
// generation task (a request with answers) the greedy answer.
struct Served {
  std::vector<std::vector<float>> logits;
  std::vector<size_t> reused;
  std::vector<double> ttft_ms;
  std::vector<uint64_t> disk_bytes;
  std::vector<std::string> answers;  // per variant; empty where none was generated
};

// The greedy answer after a served prompt: decodes from its last logits row
// over the request's own K/V (ServeOptions::keep_kv: for a selective system
// the rows its prompt attended, so the answer attends the same reduced
// prefix), at most r.max_tokens tokens, stopping at EOS.
Result<std::string> GreedyAnswer(const Model& model, const Tokenizer& tok, const TaskRequest& r,
                                 engine::ServeResult& s) {
  const size_t vocab = static_cast<size_t>(model.config().vocab_size);
  if (!s.sequence || s.logits.size() < vocab) return Status::InvalidArgument("generation: the serve kept no K/V");
  GenerateOptions g;
  g.max_tokens = r.max_tokens;
  GenerateResult res;
  res.prompt_tokens = r.Joined();
  std::vector<float> last(s.logits.end() - static_cast<ptrdiff_t>(vocab), s.logits.end());
  Sequence* seq = s.sequence.get();
  const StepFn step = [&model, seq](int32_t t) { return seq->Step(model, t); };
  RETURN_IF_ERROR(Continue(tok, model.config().context_length, std::move(last), step, g, &res));
  return res.text;
}

Result<Served> ServeAll(const Model& model, engine::Engine& eng, std::span<const TaskRequest> reqs,
                        const std::vector<Variant>& vs, const HarnessOptions& o, const std::string& what) {
  Served out;
  for (size_t i = 0; i < vs.size(); ++i) {
    const TaskRequest& r = reqs[vs[i].req];
    const bool generate = vs[i].choice < 0 && !r.answers.empty();
    if (generate && !o.tokenizer) return Status::InvalidArgument("requests with answers need the harness's tokenizer");
    engine::ServeOptions so;
    so.store = false;
    so.logits_from = vs[i].from;
    so.keep_kv = generate;
    ASSIGN_OR_RETURN(engine::ServeResult s, eng.Serve(vs[i].tokens, so));
    std::string answer;
    if (generate) {
      ASSIGN_OR_RETURN(answer, GreedyAnswer(model, *o.tokenizer, r, s));
    }
    out.answers.push_back(std::move(answer));
    out.ttft_ms.push_back(s.stats.ttft_ms);
    out.disk_bytes.push_back(s.stats.disk_bytes_read);
    s.sequence.reset();
    out.logits.push_back(std::move(s.logits));
    out.reused.push_back(s.stats.reused_tokens);
    if (o.progress) o.progress(what, i + 1, vs.size());
  }
  return out;
}

// RULER's string_match_all for one answer: the share of the expected
// strings the answer contains, compared case-insensitively.
double AnswerScore(const std::vector<std::string>& expected, const std::string& answer) {
  const auto lower = [](std::string t) {
    for (char& ch : t) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return t;
  };
  const std::string a = lower(answer);
  size_t found = 0;
  for (const std::string& e : expected) found += a.find(lower(e)) != std::string::npos;
  return expected.empty() ? 0.0 : double(found) / double(expected.size());
}

// The generation tasks' scores of one system: per task (mean score, and per
// length and per length and depth, the cells of a needle-in-a-haystack
// heatmap), overall, and the requests it answered worse than recompute
// (the first 16, with both answers: where to look for a lost needle).
json AnswerScores(std::span<const TaskRequest> reqs, const std::vector<Variant>& vs, const Served& reference,
                  const Served& got) {
  struct Cell {
    double sum = 0;
    size_t n = 0;
    void Add(double x) { sum += x, ++n; }
    json Json() const { return {{"n", n}, {"score", n ? sum / double(n) : 0.0}}; }
  };
  struct Task {
    Cell all, ref;
    std::map<int, Cell> by_length;
    std::map<int, std::map<std::string, Cell>> by_depth;
  };
  std::map<std::string, Task> tasks;
  Cell overall;
  json lost = json::array();
  size_t worse = 0;
  for (size_t i = 0; i < vs.size(); ++i) {
    const TaskRequest& r = reqs[vs[i].req];
    if (vs[i].choice >= 0 || r.answers.empty()) continue;
    const double mine = AnswerScore(r.answers, got.answers[i]);
    const double ref = AnswerScore(r.answers, reference.answers[i]);
    Task& t = tasks[r.task.empty() ? "default" : r.task];
    t.all.Add(mine);
    t.ref.Add(ref);
    overall.Add(mine);
    t.by_length[r.length].Add(mine);
    if (r.depth >= 0) t.by_depth[r.length][DepthLabel(r.depth)].Add(mine);
    if (mine < ref && worse++ < 16) {
      lost.push_back({{"id", r.id}, {"answers", r.answers}, {"got", got.answers[i]},
                      {"recompute", reference.answers[i]}, {"length", r.length},
                      {"depth", r.depth >= 0 ? json(r.depth) : json()}});
    }
  }
  json per = json::object();
  for (const auto& [name, t] : tasks) {
    json j = {{"requests", t.all.n}, {"score", t.all.Json()["score"]}, {"recompute_score", t.ref.Json()["score"]}};
    for (const auto& [len, c] : t.by_length) j["by_length"][std::to_string(len)] = c.Json();
    for (const auto& [len, depths] : t.by_depth) {
      for (const auto& [d, c] : depths) j["by_depth"][std::to_string(len)][d] = c.Json();
    }
    per[name] = std::move(j);
  }
  return {{"requests", overall.n}, {"score", overall.Json()["score"]}, {"tasks", per},
          {"worse_than_recompute", worse}, {"lost", lost}};
}

// The quality pass's own timing of a system: its serves from empty pools at
// its start (a request on a prefix an earlier one shared finds what that
// one loaded)
// (each system's reads from the store's disk tier, recompute's prefill of
// the whole prompt), and what it read from disk.
json ColdServes(const Served& got) {
  double bytes = 0;
  for (uint64_t b : got.disk_bytes) bytes += double(b);
  const size_t n = got.ttft_ms.size();
  return {{"ttft_ms_p50", n ? Percentile(got.ttft_ms, 0.5) : 0.0},
          {"ttft_ms_mean", n ? std::accumulate(got.ttft_ms.begin(), got.ttft_ms.end(), 0.0) / double(n) : 0.0},
          {"disk_bytes_mean", n ? bytes / double(n) : 0.0}};
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
            {"tasks", TaskAccuracy(reqs, picks, ref_picks)},
            {"cold", ColdServes(got)}};
  if (std::any_of(reqs.begin(), reqs.end(), [](const TaskRequest& r) { return !r.answers.empty(); })) {
    q["answers"] = AnswerScores(reqs, vs, reference, got);
  }
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
  ASSIGN_OR_RETURN(ref->served, ServeAll(model, *rec, reqs, vs, o, "quality: recompute"));
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
      if (o.rounds == 0 && eng->UsesProfile() && (engine::TraitsOf(sys).profiled || eng->ProbeFits().empty())) {
        // No timed round profiled this store: as MeasureRound does, on the
        // profiling prompts, unmeasured.
        RETURN_IF_ERROR(eng->Profile(ProfilingPrompts(reqs)).status());
      }
      if (o.rounds == 0 && !eng->ProbeFits().empty()) (*per)[name]["probe_profile"] = ProbeFitJson(eng->ProbeFits());
      ASSIGN_OR_RETURN(own, ServeAll(model, *eng, reqs, vs, o, "quality: " + name));
    }
    const Served& got = sys == engine::System::kRecompute ? ref->served : own;
    const Served* against = sys == engine::System::kAsLike ? &got : (exact ? &*exact : nullptr);  // as-like: 0
    (*per)[name]["quality"] = Compare(reqs, vs, ref->served, got, against, ref->picks, vocab);
    if (sys == engine::System::kAsLike) exact = std::move(own);
  }
  return Status::Ok();
}

}  // namespace tierkv::bench

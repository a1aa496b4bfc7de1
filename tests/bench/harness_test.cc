// The harness (tierkv/tools/harness.h) on the default model: every system's
// figures, exactness at retention 1.0, and task accuracy by log-likelihood
// checked against the model's own logits.
#include "tierkv/tools/harness.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "engine/model_fixture.h"
#include "tierkv/generate.h"
#include "testing/shared.h"

namespace tierkv::bench {
namespace {

class HarnessTest : public engine::DefaultModelTest {
 protected:
  static std::vector<int32_t> Slice(size_t from, size_t n) {
    return std::vector<int32_t>(corpus_->begin() + from, corpus_->begin() + from + n);
  }
  // Four requests on two shared prefixes, each with three choices.
  static std::vector<TaskRequest> Requests() {
    std::vector<TaskRequest> out;
    for (int i = 0; i < 4; ++i) {
      TaskRequest r;
      r.id = "r" + std::to_string(i);
      r.task = "t";
      // BOS first (the corpus starts with it); whole chunks of 64, so that
      // every system reuses all of it (as-like alone would reuse a partial
      // last chunk).
      r.prefix = Slice(0, i % 2 ? 192 : 320);
      r.query = Slice(400 + 20 * i, 8);
      for (int c = 0; c < 3; ++c) r.choices.push_back(Slice(600 + 40 * c + 7 * i, 3 + c));
      out.push_back(std::move(r));
    }
    return out;
  }
  // Each choice's log-likelihood after prefix + query, from one forward pass.
  static double LogLikelihood(const TaskRequest& r, int c) {
    std::vector<int32_t> t = r.Joined();
    t.insert(t.end(), r.choices[c].begin(), r.choices[c].end());
    PrefillOptions po;
    po.logits = LogitsMode::kAll;
    auto p = model_->Prefill(t, po);
    EXPECT_TRUE(p.ok());
    const size_t V = static_cast<size_t>(model_->config().vocab_size), first = r.Joined().size();
    double ll = 0;
    for (size_t j = 0; j < r.choices[c].size(); ++j) {
      const float* row = p->logits.data() + (first - 1 + j) * V;
      double mx = row[0], z = 0;
      for (size_t v = 0; v < V; ++v) mx = std::max<double>(mx, row[v]);
      for (size_t v = 0; v < V; ++v) z += std::exp(row[v] - mx);
      ll += row[r.choices[c][j]] - mx - std::log(z);
    }
    return ll;
  }
  static HarnessOptions Options(const std::string& dir, std::vector<engine::System> systems, double retention) {
    HarnessOptions h;
    h.systems = std::move(systems);
    h.base.cache_dir = dir;
    h.base.retention = retention;
    h.warmup = 0;
    h.rounds = 1;
    h.quality = true;
    return h;
  }
};

TEST_F(HarnessTest, EverySystemReportsAndRetentionOneIsExact) {
  const std::string dir = testing::MakeTempDir("harness");
  const std::vector<TaskRequest> reqs = Requests();
  std::vector<engine::System> all(engine::AllSystems().begin(), engine::AllSystems().end());
  auto r = RunHarness(*model_, reqs, Options(dir, all, 1.0));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const nlohmann::json& sys = (*r)["systems"];
  EXPECT_GT((*r)["stored_bytes"].get<uint64_t>(), 0u);
  for (engine::System s : all) {
    const std::string name(engine::SystemName(s));
    ASSERT_TRUE(sys.contains(name)) << name;
    const nlohmann::json& j = sys[name];
    EXPECT_GT(j["ttft_ms_mean"].get<double>(), 0) << name;
    const nlohmann::json& q = j["quality"];
    EXPECT_EQ(q["rows"].get<size_t>(), 4u * (8 * 3 + 3 + 4 + 5)) << name;  // query + choice rows, every choice
    // fp16-KV reuse is what as-like serves; at retention 1.0 every reusing
    // system must give exactly its logits.
    if (engine::TraitsOf(s).reuses) {
      EXPECT_EQ(q["max_abs_logit_diff_vs_as_like"].get<double>(), 0.0) << name;
      EXPECT_EQ(q["compared_with_as_like"].get<size_t>(), 12u) << name;  // every serve
    }
    EXPECT_TRUE(q["tasks"]["t"].contains("accuracy")) << name;
  }
  EXPECT_EQ(sys["recompute"]["quality"]["top1_agree"].get<double>(), 1.0);
  EXPECT_EQ(sys["recompute"]["quality"]["kl_mean"].get<double>(), 0.0);
  EXPECT_EQ(sys["recompute"]["disk_bytes_read"].get<uint64_t>(), 0u);
  EXPECT_GT(sys["as-like"]["disk_bytes_read"].get<uint64_t>() + sys["as-like"]["device_bytes_read"].get<uint64_t>() +
                sys["as-like"]["host_bytes_read"].get<uint64_t>(),
            0u);
  std::filesystem::remove_all(dir);
}

TEST_F(HarnessTest, AccuracyPicksTheChoiceOfHighestLikelihood) {
  const std::string dir = testing::MakeTempDir("harness_acc");
  std::vector<TaskRequest> reqs = Requests();
  for (size_t i = 0; i < reqs.size(); ++i) {
    int best = 0, worst = 0;
    std::vector<double> ll;
    for (int c = 0; c < 3; ++c) ll.push_back(LogLikelihood(reqs[i], c));
    for (int c = 1; c < 3; ++c) {
      if (ll[c] > ll[best]) best = c;
      if (ll[c] < ll[worst]) worst = c;
    }
    ASSERT_NE(best, worst);
    reqs[i].label = i == 3 ? worst : best;  // three right, one wrong
  }
  reqs[2].label = -1;  // unlabelled: counted in agreement only
  auto r = RunHarness(*model_, reqs, Options(dir, {engine::System::kRecompute, engine::System::kAsLike}, 1.0));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const char* name : {"recompute", "as-like"}) {
    const nlohmann::json& t = (*r)["systems"][name]["quality"]["tasks"]["t"];
    EXPECT_EQ(t["questions"].get<size_t>(), 4u) << name;
    EXPECT_EQ(t["labelled"].get<size_t>(), 3u) << name;
    EXPECT_DOUBLE_EQ(t["accuracy"].get<double>(), 2.0 / 3.0) << name;
    EXPECT_DOUBLE_EQ(t["agree_with_recompute"].get<double>(), 1.0) << name;
  }
  std::filesystem::remove_all(dir);
}

// Generation tasks: the quality pass alone (no timed rounds) generates each
// system's greedy answer and scores the expected strings it contains; what
// recompute generates is Generate's greedy continuation of the whole prompt.
TEST_F(HarnessTest, GenerationTasksScoreTheGreedyAnswer) {
  const std::string dir = testing::MakeTempDir("harness_gen");
  auto tok = LoadTokenizerFor(*model_, "");
  ASSERT_TRUE(tok.ok());
  std::vector<TaskRequest> reqs = Requests();
  for (TaskRequest& r : reqs) {
    r.choices.clear();
    r.max_tokens = 8;
    r.length = static_cast<int>(1000 + &r - &reqs[0]);  // one request per length
    r.depth = 0.5;
  }
  // What recompute answers: the greedy continuation of prefix + query.
  GenerateOptions g;
  g.max_tokens = 8;
  auto want = Generate(*model_, **tok, reqs[0].Joined(), g);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  ASSERT_FALSE(want->text.empty());
  reqs[0].answers = {want->text};             // found whole: 1
  reqs[1].answers = {"\x01never-generated"};   // 0
  reqs[2].answers = {"\x01never", want->text};  // another request's answer: 0 unless it says the same
  reqs[3].answers = {"\x01never"};
  HarnessOptions h = Options(dir, {engine::System::kRecompute, engine::System::kAsLike}, 1.0);
  h.rounds = 0;
  h.warmup = 0;
  h.tokenizer = tok->get();
  auto r = RunHarness(*model_, reqs, h);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const char* name : {"recompute", "as-like"}) {
    const nlohmann::json& a = (*r)["systems"][name]["quality"]["answers"];
    EXPECT_EQ(a["requests"].get<size_t>(), 4u) << name;
    EXPECT_DOUBLE_EQ(a["tasks"]["t"]["by_length"][std::to_string(reqs[0].length)]["score"].get<double>(), 1.0) << name;
    EXPECT_LE(a["score"].get<double>(), 1.5 / 4) << name;
    EXPECT_GE(a["score"].get<double>(), 1.0 / 4) << name;
    EXPECT_EQ(a["worse_than_recompute"].get<size_t>(), 0u) << name;  // fp16 K/V: the same answers here
    EXPECT_TRUE(a["tasks"]["t"]["by_depth"].is_object()) << name;
    EXPECT_GT((*r)["systems"][name]["quality"]["cold"]["ttft_ms_p50"].get<double>(), 0) << name;
  }
  // Without a tokenizer the answers cannot be read: refused, not scored 0.
  h.tokenizer = nullptr;
  EXPECT_FALSE(RunHarness(*model_, reqs, h).ok());
  std::filesystem::remove_all(dir);
}

TEST_F(HarnessTest, BadOptionsAreRefused) {
  HarnessOptions h;
  EXPECT_EQ(RunHarness(*model_, Requests(), h).status().code(), StatusCode::kInvalidArgument);  // no systems
  h.systems = {engine::System::kAsLike};
  h.rounds = 0;
  EXPECT_EQ(RunHarness(*model_, Requests(), h).status().code(), StatusCode::kInvalidArgument);
  h.rounds = 1;
  EXPECT_EQ(RunHarness(*model_, {}, h).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tierkv::bench

// Batched forward passes (continuous batching's decode step) on the default
// model: PrefillBatch gives each sequence what Prefill gives it alone, for
// sequences of different lengths and positions; StepBatch decodes several
// sequences as Step decodes each; a bad item fails the batch and leaves
// every sequence as it was.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "testing/status_matchers.h"
#include "tierkv/model.h"
#include "tierkv/sequence.h"

namespace tierkv {
namespace {

using ::tierkv::testing::StatusIs;

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
  return d;
}

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::vector<int32_t> Tokens(size_t n, int32_t seed) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = 3 + static_cast<int32_t>((seed * 7919 + i * 104729) % 500);
  return t;
}

class BatchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::Load(TIERKV_DEFAULT_MODEL);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  // A sequence that has run `prompt`.
  static std::unique_ptr<Sequence> Prompted(const std::vector<int32_t>& prompt, std::vector<float>* logits) {
    auto s = std::make_unique<Sequence>(model_->config(), 0);
    auto r = s->Step(*model_, prompt);
    EXPECT_OK(r.status());
    if (r.ok()) *logits = std::move(*r);
    return s;
  }
  static inline Model* model_ = nullptr;
};

TEST_F(BatchTest, PrefillBatchGivesEachSequenceWhatPrefillGivesIt) {
  const std::vector<std::vector<int32_t>> prompts = {Tokens(37, 1), Tokens(5, 2), Tokens(90, 3)};
  const int starts[] = {0, 10, 3};  // positions of their own (no prefix rows)
  std::vector<BatchItem> items;
  std::vector<PrefillResult> alone;
  for (size_t i = 0; i < prompts.size(); ++i) {
    PrefillOptions o;
    o.start_pos = starts[i];
    o.capture_kv = true;
    o.kv_dtype = KvDType::kF16;
    o.logits = i == 1 ? LogitsMode::kAll : LogitsMode::kLast;
    items.push_back({prompts[i], o});
    ASSERT_OK_AND_ASSIGN(PrefillResult r, model_->Prefill(prompts[i], o));
    alone.push_back(std::move(r));
  }
  ASSERT_OK_AND_ASSIGN(std::vector<PrefillResult> batch, model_->PrefillBatch(items));
  ASSERT_EQ(batch.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(batch[i].n_tokens, alone[i].n_tokens);
    EXPECT_LE(MaxDiff(batch[i].logits, alone[i].logits), 1e-4);
    ASSERT_EQ(batch[i].kv.size(), alone[i].kv.size());
    for (size_t l = 0; l < alone[i].kv.size(); ++l) {
      EXPECT_EQ(batch[i].kv[l].k.size(), alone[i].kv[l].k.size());
    }
  }
}

TEST_F(BatchTest, StepBatchDecodesAsStepDoesForEach) {
  const std::vector<std::vector<int32_t>> prompts = {Tokens(64, 4), Tokens(3, 5), Tokens(150, 6)};
  std::vector<std::unique_ptr<Sequence>> alone, together;
  std::vector<int32_t> next_alone, next_together;
  for (const auto& p : prompts) {
    std::vector<float> a, b;
    alone.push_back(Prompted(p, &a));
    together.push_back(Prompted(p, &b));
    next_alone.push_back(Argmax(a));
    next_together.push_back(Argmax(b));
  }
  ASSERT_EQ(next_alone, next_together);
  for (int step = 0; step < 12; ++step) {
    std::vector<Sequence*> seqs;
    for (auto& s : together) seqs.push_back(s.get());
    ASSERT_OK_AND_ASSIGN(auto batch, Sequence::StepBatch(*model_, seqs, next_together));
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_OK_AND_ASSIGN(std::vector<float> one, alone[i]->Step(*model_, next_alone[i]));
      EXPECT_LE(MaxDiff(batch[i], one), 1e-4) << "sequence " << i << " step " << step;
      next_alone[i] = Argmax(one);
      next_together[i] = Argmax(batch[i]);
      EXPECT_EQ(together[i]->position(), alone[i]->position());
    }
    EXPECT_EQ(next_together, next_alone) << "greedy text diverged at step " << step;
  }
}

TEST_F(BatchTest, ABadItemFailsTheBatchAndChangesNoSequence) {
  std::vector<float> l;
  auto a = Prompted(Tokens(20, 7), &l);
  auto b = Prompted(Tokens(30, 8), &l);
  std::vector<Sequence*> seqs = {a.get(), b.get()};
  const std::vector<int32_t> bad = {5, model_->config().vocab_size};
  EXPECT_THAT(Sequence::StepBatch(*model_, seqs, bad).status(), StatusIs(StatusCode::kInvalidArgument, "vocabulary"));
  EXPECT_EQ(a->position(), 20);
  EXPECT_EQ(b->position(), 30);
  EXPECT_THAT(Sequence::StepBatch(*model_, seqs, std::vector<int32_t>{5}).status(),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(model_->PrefillBatch({}).status(), StatusIs(StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace tierkv

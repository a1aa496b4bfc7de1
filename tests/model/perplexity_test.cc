#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/test_models.h"
#include "testing/status_matchers.h"
#include "tierkv/eval.h"

namespace tierkv {
namespace {

using testing::StatusIs;

TEST(PerplexityTest, MatchesLogSoftmaxOfOnePrefillPerWindow) {
  ASSERT_OK_AND_ASSIGN(auto m, Model::Random(testing::TinyConfig(), 4));
  std::mt19937 rng(2);
  std::vector<int32_t> tokens(100);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % 64);
  ASSERT_OK_AND_ASSIGN(auto r, EvaluatePerplexity(*m, tokens, 40));
  EXPECT_EQ(r.windows, 3);  // 40 + 40 + 20
  EXPECT_EQ(r.tokens_scored, 39 + 39 + 19);
  double nll = 0;
  for (int start : {0, 40, 80}) {
    const int len = std::min(40, 100 - start);
    PrefillOptions o;
    o.logits = LogitsMode::kAll;
    ASSERT_OK_AND_ASSIGN(auto p, m->Prefill(std::span(tokens).subspan(start, len), o));
    for (int i = 0; i + 1 < len; ++i) {
      double z = 0;
      for (int v = 0; v < 64; ++v) z += std::exp(double(p.logits[i * 64 + v]));
      nll += std::log(z) - p.logits[i * 64 + tokens[start + i + 1]];
    }
  }
  EXPECT_NEAR(r.mean_nll, nll / r.tokens_scored, 1e-6);
  EXPECT_NEAR(r.perplexity, std::exp(r.mean_nll), 1e-9);
  // Small random weights give nearly uniform predictions: perplexity ~ vocabulary.
  EXPECT_NEAR(r.perplexity, 64.0, 64.0 * 0.05);
}

TEST(PerplexityTest, RejectsBadWindowsAndShortStreams) {
  ASSERT_OK_AND_ASSIGN(auto m, Model::Random(testing::TinyConfig(), 4));
  std::vector<int32_t> tokens(10, 3);
  EXPECT_THAT(EvaluatePerplexity(*m, tokens, 1), StatusIs(StatusCode::kInvalidArgument, "window"));
  EXPECT_THAT(EvaluatePerplexity(*m, tokens, 129), StatusIs(StatusCode::kInvalidArgument, "128"));
  EXPECT_THAT(EvaluatePerplexity(*m, std::vector<int32_t>{3}, 8),
              StatusIs(StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace tierkv

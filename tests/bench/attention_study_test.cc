#include "tierkv/tools/attention_study.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "model/test_models.h"
#include "testing/shared.h"
#include "testing/status_matchers.h"
#include "tierkv/tokenizer.h"

namespace tierkv::bench {
namespace {

using testing::StatusIs;

TEST(AttentionStudyTest, ShapesRangesAndErrorsOnARandomModel) {
  ASSERT_OK_AND_ASSIGN(auto m, Model::Random(testing::TinyConfig(4, 2), 3));
  std::mt19937 rng(1);
  std::vector<int32_t> corpus(1000);
  for (auto& t : corpus) t = static_cast<int32_t>(rng() % 64);
  AttentionStudyOptions o;
  o.prompts = 4;
  o.min_tokens = 100;
  o.query_tokens = 20;
  ASSERT_OK_AND_ASSIGN(auto s, RunAttentionStudy(*m, "tiny", corpus, 1, o));
  EXPECT_EQ(s.prompt_tokens, 100);
  EXPECT_EQ(s.prefix_tokens, 80);
  EXPECT_EQ(s.probe_heads, 2);  // only 2 KV heads
  ASSERT_EQ(s.layers.size(), 3u);
  for (size_t l = 0; l < 3; ++l) {
    const auto& a = s.layers[l];
    EXPECT_GE(a.top10_mass, 0.1 - 1e-9);  // the top 10% hold at least 10%
    EXPECT_LE(a.top10_mass, 1.0);
    EXPECT_GE(a.heads_jaccard40, 0.0);
    EXPECT_LE(a.heads_jaccard40, 1.0);
    EXPECT_NEAR(a.probe_vs_all25, 1.0, 1e-9);  // all heads are probes here
  }
  EXPECT_LT(s.layers[2].next_layer_jaccard25, 0);  // the last layer has no next
  EXPECT_GE(s.layers[0].next_layer_jaccard25, 0);
  EXPECT_NE(StudyToMarkdown(s).find("| random selection | 0.100 | 0.053 | 0.250 |"),
            std::string::npos);
  o.min_tokens = 2000;  // capped at the context, 128, still longer than...
  EXPECT_THAT(RunAttentionStudy(*m, "tiny", std::span(corpus).first(50), 1, o),
              StatusIs(StatusCode::kInvalidArgument, "fewer than one prompt"));
}

// The premise of the project on a real, well-trained model: a few prefix
// tokens take most of the attention, and heads agree far above chance.
TEST(AttentionStudyTest, Stories260KAttentionIsConcentratedAndShared) {
  TIERKV_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  TIERKV_REQUIRE_SHARED("data/corpus/austen.txt");
  ASSERT_OK_AND_ASSIGN(auto m, Model::Load(testing::Stories("stories260K.bin")));
  ASSERT_OK_AND_ASSIGN(auto tok, LoadTokenizerFor(*m, testing::Stories("tok512.model")));
  std::ifstream in(testing::SharedPath("data/corpus/austen.txt"));
  std::ostringstream ss;
  ss << in.rdbuf();
  ASSERT_OK_AND_ASSIGN(auto ids, tok->Encode(ss.str().substr(0, 300000), false));
  AttentionStudyOptions o;
  o.prompts = 10;
  o.min_tokens = 512;
  ASSERT_OK_AND_ASSIGN(auto s, RunAttentionStudy(*m, "stories260K", ids, tok->bos_id(), o));
  double mass = 0, j10 = 0;
  for (const auto& a : s.layers) {
    mass += a.top10_mass / s.layers.size();
    j10 += a.heads_jaccard10 / s.layers.size();
  }
  EXPECT_GT(mass, 0.5);
  EXPECT_GT(j10, 4 * 0.053);  // random selection would give 0.053
}

}  // namespace
}  // namespace tierkv::bench

// The needle study (tierkv/tools/needle_study.h) on the default model: a
// request whose expected string sits once in its prefix is located (one
// that is absent or repeated is skipped), and its figures are consistent
// shares. What attention finds is the model's: docs/accuracy.md has
// SmolLM2's.
#include "tierkv/tools/needle_study.h"

#include <gtest/gtest.h>

#include "engine/model_fixture.h"
#include "testing/status_matchers.h"

namespace tierkv::bench {
namespace {

class NeedleStudyTest : public engine::DefaultModelTest {};

TEST_F(NeedleStudyTest, LocatesTheNeedleAndReportsShares) {
  auto tok = LoadTokenizerFor(*model_, "");
  ASSERT_TRUE(tok.ok());
  TaskRequest r;
  std::vector<int32_t> prefix(corpus_->begin(), corpus_->begin() + 300);  // BOS first
  ASSERT_OK_AND_ASSIGN(std::vector<int32_t> needle, (*tok)->Encode(" The magic word is zebra.", false));
  prefix.insert(prefix.begin() + 150, needle.begin(), needle.end());
  r.prefix = prefix;
  ASSERT_OK_AND_ASSIGN(r.query, (*tok)->Encode(" What is the magic word? The magic word is", false));
  r.answers = {"zebra"};
  r.depth = 0.5;
  TaskRequest absent = r;
  absent.answers = {"\x01not-in-the-prefix"};
  TaskRequest twice = r;
  twice.prefix.insert(twice.prefix.begin() + 40, needle.begin(), needle.end());
  NeedleStudyOptions o;
  ASSERT_OK_AND_ASSIGN(NeedleStudy s, RunNeedleStudy(*model_, **tok, std::vector<TaskRequest>{r, absent, twice}, o));
  EXPECT_EQ(s.requests, 3);
  EXPECT_EQ(s.located, 1);
  ASSERT_EQ(s.layers.size(), static_cast<size_t>(model_->config().n_layers));
  for (const NeedleLayer& L : s.layers) {
    EXPECT_GT(L.needed_shared, 0);
    EXPECT_LE(L.needed_shared, 1);
    for (size_t i = 0; i < o.retentions.size(); ++i) {
      for (double x : {L.kept_shared[i], L.kept_blocks[i], L.kept_every_head[i], L.kept_some_head[i]}) {
        EXPECT_TRUE(x == 0 || x == 1) << "one request: kept or not";
      }
      // Blocks hold what single rows hold; every head's set only what some head's does.
      EXPECT_LE(L.kept_every_head[i], L.kept_some_head[i]);
      if (i > 0) EXPECT_GE(L.kept_blocks[i], L.kept_blocks[i - 1]);
    }
  }
  ASSERT_EQ(s.by_depth.size(), 1u);
  EXPECT_EQ(s.by_depth[0].first, "0.50");
  EXPECT_NE(NeedleStudyToMarkdown(s).find("1 of 3 requests"), std::string::npos);
  // No needle anywhere: an error, not an empty table.
  EXPECT_FALSE(RunNeedleStudy(*model_, **tok, std::vector<TaskRequest>{absent}, o).ok());
}

}  // namespace
}  // namespace tierkv::bench

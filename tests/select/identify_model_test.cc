// Identification on recorded attention: the default model's column sums for
// a real prefix, per layer; the probe decision, threshold and selected set
// equal the brute-force reference, and the layers that fall back are counted.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "select/identify.h"
#include "select/identify_reference.h"
#include "testing/status_matchers.h"
#include "tierkv/model.h"
#include "tierkv/tokenizer.h"

namespace tierkv::select {
namespace {

TEST(IdentifyModelTest, ProbeDecisionsOnRecordedAttentionEqualTheReference) {
  ASSERT_OK_AND_ASSIGN(auto model, Model::Load(TIERKV_DEFAULT_MODEL));
  ASSERT_OK_AND_ASSIGN(auto tok, LoadTokenizerFor(*model, ""));
  // Real English from the repository itself: the model card.
  std::string path = TIERKV_DEFAULT_MODEL;
  path = path.substr(0, path.rfind('/')) + "/README.md";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  ASSERT_OK_AND_ASSIGN(std::vector<int32_t> tokens, tok->Encode(text.str(), true));
  const int np = 700, nq = 64;
  ASSERT_GE(tokens.size(), size_t{np + nq});
  tokens.resize(np + nq);
  const ModelConfig& c = model->config();

  PrefillOptions first;
  first.capture_kv = true;
  first.logits = LogitsMode::kNone;
  ASSERT_OK_AND_ASSIGN(PrefillResult pre, model->Prefill(std::span(tokens).first(np), first));
  PrefillOptions rest;
  rest.start_pos = np;
  rest.logits = LogitsMode::kNone;
  rest.column_sums = true;
  rest.before_attention = [&](const LayerView& v, LayerPrefix* prefix) {
    prefix->heads.resize(c.n_kv_heads);
    for (int h = 0; h < c.n_kv_heads; ++h) {
      const size_t off = static_cast<size_t>(h) * c.head_dim() * sizeof(float);
      prefix->heads[h] = KvRows{pre.kv[v.layer].k.data() + off, pre.kv[v.layer].v.data() + off,
                                KvDType::kF32, static_cast<size_t>(np),
                                static_cast<size_t>(c.kv_dim()), static_cast<size_t>(c.kv_dim()),
                                nullptr};
    }
    return Status::Ok();
  };
  ASSERT_OK_AND_ASSIGN(PrefillResult r, model->Prefill(std::span(tokens).subspan(np), rest));

  for (double retention : {0.25, 0.5}) {
    int fallbacks = 0;
    for (int l = 0; l < c.n_layers; ++l) {
      const auto heads = KvHeadScores(r.column_sums[l], c.group());
      ASSERT_EQ(heads.size(), static_cast<size_t>(c.n_kv_heads));
      const std::vector<std::vector<float>> probes(heads.begin(), heads.begin() + 3);
      IdentifyOptions o;
      o.retention = retention;
      const ProbeDecision d = DecideWithProbes(probes, o);
      const testing::RefDecision ref = testing::Reference(probes, retention, o.alpha, o.aggregation);
      SCOPED_TRACE("layer " + std::to_string(l) + " retention " + std::to_string(retention));
      EXPECT_EQ(d.probe_sets, ref.sets);
      EXPECT_NEAR(d.jaccard, ref.jaccard, 1e-12);
      EXPECT_NEAR(d.threshold, ref.threshold, 1e-12);
      EXPECT_EQ(d.use_probes, ref.use);
      EXPECT_EQ(d.selected, ref.selected);
      // The fallback: all heads' summed scores.
      const std::vector<int32_t> all = SelectBySummedScores(heads, d.k);
      EXPECT_EQ(all, testing::RefTopK([&] {
                  std::vector<float> s(np, 0.0f);
                  for (const auto& h : heads) {
                    for (int j = 0; j < np; ++j) s[j] += h[j];
                  }
                  return s;
                }(), d.k));
      if (!d.use_probes) ++fallbacks;
      std::printf("retention %.2f layer %d: probes' Jaccard %.3f, threshold %.3f -> %s; "
                  "probe set vs all-heads set %.3f\n",
                  retention, l, d.jaccard, d.threshold, d.use_probes ? "probes" : "all keys",
                  d.use_probes ? testing::RefJaccard(d.selected, all) : 1.0);
    }
    std::printf("retention %.2f: %d of %d layers fall back to all keys\n", retention, fallbacks,
                c.n_layers);
  }
}

}  // namespace
}  // namespace tierkv::select

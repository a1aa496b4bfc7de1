// Issue #2, must-show 2: over >= 50 random splits of real prompts into prefix
// + rest, prefilling the rest with the prefix's K/V supplied through the hooks
// (all rows, shuffled storage order per head) gives one full prefill's logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "testing/shared.h"
#include "testing/status_matchers.h"
#include "tierkv/tokenizer.h"

namespace tierkv {
namespace {

using testing::SharedPath;
using testing::Stories;

double SplitReuseMaxDiff(const Model& m, const std::vector<int32_t>& corpus, KvDType dtype,
                         int trials, uint32_t seed, double* mean_out) {
  const ModelConfig& c = m.config();
  std::mt19937 rng(seed);
  double worst = 0, sum = 0;
  for (int t = 0; t < trials; ++t) {
    const int n = 16 + static_cast<int>(rng() % (c.context_length - 16));
    const size_t start = rng() % (corpus.size() - n);
    std::vector<int32_t> tokens(corpus.begin() + start, corpus.begin() + start + n);
    tokens[0] = 1;  // prompts begin with BOS
    const int split = 1 + static_cast<int>(rng() % (n - 1));

    PrefillOptions full;
    full.logits = LogitsMode::kAll;
    auto ref = m.Prefill(tokens, full);
    EXPECT_TRUE(ref.ok());
    PrefillOptions first;
    first.capture_kv = true;
    first.kv_dtype = dtype;
    first.logits = LogitsMode::kNone;
    auto pre = m.Prefill(std::span(tokens).first(split), first);
    EXPECT_TRUE(pre.ok());
    if (!ref.ok() || !pre.ok()) return 1e9;

    // Each head's rows in its own shuffled order, copied into fresh storage.
    const size_t es = KvDTypeSize(dtype);
    const int hd = c.head_dim(), kvd = c.kv_dim();
    std::vector<std::vector<uint8_t>> ks(c.n_kv_heads), vs(c.n_kv_heads);
    std::vector<std::vector<int32_t>> pos(c.n_kv_heads);
    PrefillOptions rest;
    rest.start_pos = split;
    rest.logits = LogitsMode::kAll;
    rest.before_attention = [&](const LayerView& view, LayerPrefix* p) {
      p->heads.resize(c.n_kv_heads);
      for (int h = 0; h < c.n_kv_heads; ++h) {
        pos[h].resize(split);
        std::iota(pos[h].begin(), pos[h].end(), 0);
        std::shuffle(pos[h].begin(), pos[h].end(), rng);
        ks[h].clear();
        vs[h].clear();
        for (int32_t j : pos[h]) {
          const size_t off = (static_cast<size_t>(j) * kvd + static_cast<size_t>(h) * hd) * es;
          const auto& L = pre->kv[view.layer];
          ks[h].insert(ks[h].end(), L.k.begin() + off, L.k.begin() + off + hd * es);
          vs[h].insert(vs[h].end(), L.v.begin() + off, L.v.begin() + off + hd * es);
        }
        p->heads[h] = KvRows{ks[h].data(), vs[h].data(), dtype, pos[h].size(), 0, 0, pos[h].data()};
      }
      return Status::Ok();
    };
    auto out = m.Prefill(std::span(tokens).subspan(split), rest);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    if (!out.ok()) return 1e9;
    double d = 0;
    const size_t V = c.vocab_size;
    for (size_t i = 0; i < out->logits.size(); ++i) {
      d = std::max(d, std::fabs(double(out->logits[i]) - ref->logits[split * V + i]));
    }
    worst = std::max(worst, d);
    sum += d;
  }
  *mean_out = sum / trials;
  return worst;
}

TEST(ReuseTest, HooksReuseEqualsFullPrefillOnStories260K) {
  TIERKV_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  TIERKV_REQUIRE_SHARED("data/corpus/austen.txt");
  auto m = Model::Load(Stories("stories260K.bin"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto tok = LoadTokenizerFor(**m, Stories("tok512.model"));
  ASSERT_TRUE(tok.ok());
  std::vector<int32_t> corpus;
  for (const char* f : {"data/corpus/austen.txt", "data/corpus/jargon.txt"}) {
    std::ifstream in(SharedPath(f), std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    auto ids = (*tok)->Encode(ss.str().substr(0, 60000), false);
    ASSERT_TRUE(ids.ok());
    corpus.insert(corpus.end(), ids->begin(), ids->end());
  }
  double mean32 = 0, mean16 = 0;
  const double f32 = SplitReuseMaxDiff(**m, corpus, KvDType::kF32, 50, 2024, &mean32);
  const double f16 = SplitReuseMaxDiff(**m, corpus, KvDType::kF16, 50, 2024, &mean16);
  std::printf("50 random splits, max |dlogit|: f32 KV %.3g (mean of per-split max %.3g), "
              "f16 KV %.3g (mean %.3g)\n", f32, mean32, f16, mean16);
  RecordProperty("max_abs_logit_diff_f32", std::to_string(f32));
  RecordProperty("max_abs_logit_diff_f16", std::to_string(f16));
  EXPECT_LE(f32, 1e-4);
  // fp16 storage rounds K and V to 11 significant bits; the logits move by
  // that much, not by a wrong row.
  EXPECT_LE(f16, 5e-2);
  EXPECT_GT(f16, 0.0);
}

}  // namespace
}  // namespace tierkv

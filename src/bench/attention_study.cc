#include "tierkv/tools/attention_study.h"

#include <cstdio>

#include "bench/query_importance.h"
#include "select/identify.h"
#include "select/importance.h"

namespace tierkv::bench {

using select::CountForFraction;
using select::Jaccard;
using select::MeanPairwiseJaccard;
using select::TopK;
using select::TopMassFraction;

Result<AttentionStudy> RunAttentionStudy(const Model& model, const std::string& model_name,
                                         std::span<const int32_t> corpus, int32_t bos,
                                         const AttentionStudyOptions& o,
                                         const std::function<void(int, int)>& progress) {
  const ModelConfig& c = model.config();
  const int L = std::min(o.min_tokens, c.context_length);
  const int q = o.query_tokens;
  if (o.prompts < 1) return Status::InvalidArgument("prompts must be >= 1");
  if (q < 1 || q + 16 > L) {
    return Status::InvalidArgument("query_tokens must leave at least 16 prefix tokens in a " +
                                   std::to_string(L) + "-token prompt");
  }
  if (static_cast<int64_t>(corpus.size()) < L) {
    return Status::InvalidArgument("the text has " + std::to_string(corpus.size()) +
                                   " tokens, fewer than one prompt of " + std::to_string(L));
  }
  const int np = L - q;
  const int H = c.n_kv_heads;
  const int probes = std::min(o.probe_heads, H);
  AttentionStudy s;
  s.model = model_name + " (" + c.ToString() + ")";
  s.prompts = o.prompts;
  s.prompt_tokens = L;
  s.prefix_tokens = np;
  s.kv_heads = H;
  s.probe_heads = probes;
  s.layers.resize(c.n_layers);

  const size_t k10 = CountForFraction(np, 0.10), k25 = CountForFraction(np, 0.25),
               k40 = CountForFraction(np, 0.40);
  for (int p = 0; p < o.prompts; ++p) {
    const size_t span = corpus.size() - (L - 1);
    const size_t off = o.prompts == 1 ? 0 : span * p / (o.prompts - 1);
    std::vector<int32_t> tokens;
    tokens.push_back(bos);
    tokens.insert(tokens.end(), corpus.begin() + off, corpus.begin() + off + L - 1);

    ASSIGN_OR_RETURN(const auto importance,
                     QueryImportance(model, std::span(tokens).first(np), std::span(tokens).subspan(np)));

    std::vector<int32_t> prev_set;
    for (int l = 0; l < c.n_layers; ++l) {
      // Importance per KV head: its query heads' column sums added.
      const std::vector<std::vector<float>>& imp = importance[l];
      std::vector<float> all(np, 0.0f), probe(np, 0.0f);
      double mass = 0;
      std::vector<std::vector<int32_t>> s10, s40, s25;
      for (int h = 0; h < H; ++h) {
        mass += TopMassFraction(imp[h], k10);
        s10.push_back(TopK(imp[h], k10));
        s40.push_back(TopK(imp[h], k40));
        s25.push_back(TopK(imp[h], k25));
        for (int j = 0; j < np; ++j) {
          all[j] += imp[h][j];
          if (h < probes) probe[j] += imp[h][j];
        }
      }
      const std::vector<int32_t> all25 = TopK(all, k25), probe25 = TopK(probe, k25);
      double probe_heads = 0;
      for (int h = 0; h < H; ++h) probe_heads += Jaccard(probe25, s25[h]);
      LayerAttention& out = s.layers[l];
      out.top10_mass += mass / H / o.prompts;
      out.heads_jaccard10 += MeanPairwiseJaccard(s10) / o.prompts;
      out.heads_jaccard40 += MeanPairwiseJaccard(s40) / o.prompts;
      out.probe_vs_all25 += Jaccard(probe25, all25) / o.prompts;
      out.probe_vs_heads25 += probe_heads / H / o.prompts;
      if (l > 0) {
        LayerAttention& before = s.layers[l - 1];
        if (before.next_layer_jaccard25 < 0) before.next_layer_jaccard25 = 0;
        before.next_layer_jaccard25 += Jaccard(prev_set, all25) / o.prompts;
      }
      prev_set = all25;
    }
    if (progress) progress(p + 1, o.prompts);
  }
  return s;
}

std::string StudyToMarkdown(const AttentionStudy& s) {
  std::string out;
  char buf[512];
  out += "### " + s.model + "\n\n";
  std::snprintf(buf, sizeof buf,
                "%d prompts of %d tokens: importance = column sums of the last %d rows over the "
                "first %d (the prefix), per KV head (%d); %d probe heads.\n\n",
                s.prompts, s.prompt_tokens, s.prompt_tokens - s.prefix_tokens, s.prefix_tokens,
                s.kv_heads, s.probe_heads);
  out += buf;
  out += "| layer | top-10% mass | heads Jaccard @10% | @40% | next layer @25% | probe vs all @25% "
         "| probe vs each head @25% |\n| --- | --- | --- | --- | --- | --- | --- |\n";
  double m[6] = {};
  int next_n = 0;
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const LayerAttention& a = s.layers[l];
    char next[32] = "-";
    if (a.next_layer_jaccard25 >= 0) {
      std::snprintf(next, sizeof next, "%.3f", a.next_layer_jaccard25);
      m[3] += a.next_layer_jaccard25;
      ++next_n;
    }
    std::snprintf(buf, sizeof buf, "| %zu | %.3f | %.3f | %.3f | %s | %.3f | %.3f |\n", l,
                  a.top10_mass, a.heads_jaccard10, a.heads_jaccard40, next, a.probe_vs_all25,
                  a.probe_vs_heads25);
    out += buf;
    m[0] += a.top10_mass;
    m[1] += a.heads_jaccard10;
    m[2] += a.heads_jaccard40;
    m[4] += a.probe_vs_all25;
    m[5] += a.probe_vs_heads25;
  }
  const double n = static_cast<double>(s.layers.size());
  std::snprintf(buf, sizeof buf, "| mean | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n",
                m[0] / n, m[1] / n, m[2] / n, next_n ? m[3] / next_n : 0.0, m[4] / n, m[5] / n);
  out += buf;
  std::snprintf(buf, sizeof buf,
                "| random selection | 0.100 | %.3f | %.3f | %.3f | %.3f | %.3f |\n\n",
                select::RandomJaccard(0.10), select::RandomJaccard(0.40),
                select::RandomJaccard(0.25), select::RandomJaccard(0.25),
                select::RandomJaccard(0.25));
  out += buf;
  return out;
}

std::string StudyToTable(const AttentionStudy& s) {
  std::string out = "# layer top10_mass heads_j10 heads_j40 next_j25 probe_all25 probe_heads25\n";
  char buf[256];
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const LayerAttention& a = s.layers[l];
    std::snprintf(buf, sizeof buf, "%zu %.4f %.4f %.4f %s %.4f %.4f\n", l, a.top10_mass,
                  a.heads_jaccard10, a.heads_jaccard40,
                  a.next_layer_jaccard25 >= 0 ? std::to_string(a.next_layer_jaccard25).c_str() : "NaN",
                  a.probe_vs_all25, a.probe_vs_heads25);
    out += buf;
  }
  return out;
}

}  // namespace tierkv::bench

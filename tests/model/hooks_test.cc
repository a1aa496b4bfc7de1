// The KV hooks on a random-weight model (no files needed): reuse through the
// hooks is exact, rows may come in any order and any subset, column sums
// follow the supplied order, and bad input is rejected with a clear status.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "model/test_models.h"
#include "testing/status_matchers.h"
#include "tierkv/model.h"

namespace tierkv {
namespace {

using testing::IsOk;
using testing::StatusIs;

double MaxAbsDiff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

// Supplies, for every layer, the captured prefix KV with each head's rows in
// its own random order (or a subset when keep < 1).
struct PrefixSupplier {
  const PrefillResult* captured;
  const ModelConfig* c;
  std::mt19937* rng;
  double keep = 1.0;
  // Per layer and head: the permuted rows' data, kept alive during the prefill.
  std::vector<std::vector<std::vector<uint8_t>>> k, v;
  std::vector<std::vector<std::vector<int32_t>>> pos;
  std::vector<int> calls;

  Status operator()(const LayerView& view, LayerPrefix* prefix) {
    calls.push_back(view.layer);
    const int hd = c->head_dim(), kvd = c->kv_dim();
    const size_t es = KvDTypeSize(captured->kv_dtype);
    const int n = captured->n_tokens;
    k.resize(c->n_layers);
    v.resize(c->n_layers);
    pos.resize(c->n_layers);
    k[view.layer].assign(c->n_kv_heads, {});
    v[view.layer].assign(c->n_kv_heads, {});
    pos[view.layer].assign(c->n_kv_heads, {});
    prefix->heads.resize(c->n_kv_heads);
    for (int h = 0; h < c->n_kv_heads; ++h) {
      std::vector<int32_t>& p = pos[view.layer][h];
      for (int j = 0; j < n; ++j) {
        if (keep >= 1.0 || std::uniform_real_distribution<double>(0, 1)(*rng) < keep) p.push_back(j);
      }
      std::shuffle(p.begin(), p.end(), *rng);
      auto& kk = k[view.layer][h];
      auto& vv = v[view.layer][h];
      for (int32_t j : p) {
        const size_t off = (static_cast<size_t>(j) * kvd + static_cast<size_t>(h) * hd) * es;
        kk.insert(kk.end(), captured->kv[view.layer].k.begin() + off,
                  captured->kv[view.layer].k.begin() + off + hd * es);
        vv.insert(vv.end(), captured->kv[view.layer].v.begin() + off,
                  captured->kv[view.layer].v.begin() + off + hd * es);
      }
      KvRows& r = prefix->heads[h];
      r.k = kk.data();
      r.v = vv.data();
      r.dtype = captured->kv_dtype;
      r.count = p.size();
      r.positions = p.data();
    }
    return Status::Ok();
  }
};

class HooksTest : public ::testing::TestWithParam<std::pair<int, int>> {
 protected:
  void SetUp() override {
    auto [heads, kv_heads] = GetParam();
    ModelConfig c = testing::TinyConfig(heads, kv_heads);
    auto m = Model::Random(c, 17);
    ASSERT_THAT(m, IsOk());
    model_ = std::move(*m);
  }
  std::unique_ptr<Model> model_;
};

TEST_P(HooksTest, ReuseThroughHooksEqualsFullPrefill) {
  const ModelConfig& c = model_->config();
  std::mt19937 rng(5);
  for (int trial = 0; trial < 10; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 100);
    const int split = 1 + static_cast<int>(rng() % (n - 1));
    std::vector<int32_t> tokens(n);
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % c.vocab_size);
    PrefillOptions full;
    full.logits = LogitsMode::kAll;
    ASSERT_OK_AND_ASSIGN(auto ref, model_->Prefill(tokens, full));

    PrefillOptions first;
    first.capture_kv = true;
    ASSERT_OK_AND_ASSIGN(auto pre, model_->Prefill(std::span(tokens).first(split), first));
    PrefixSupplier sup{&pre, &c, &rng};
    PrefillOptions rest;
    rest.start_pos = split;
    rest.logits = LogitsMode::kAll;
    rest.before_attention = std::ref(sup);
    ASSERT_OK_AND_ASSIGN(auto out, model_->Prefill(std::span(tokens).subspan(split), rest));
    std::vector<int> want(c.n_layers);
    std::iota(want.begin(), want.end(), 0);
    EXPECT_EQ(sup.calls, want);
    const size_t V = c.vocab_size;
    EXPECT_LT(MaxAbsDiff(out.logits.data(), ref.logits.data() + split * V, (n - split) * V), 1e-4);
  }
}

TEST_P(HooksTest, ColumnSumsFollowTheSuppliedOrderAndSumToTheAttentionMass) {
  const ModelConfig& c = model_->config();
  std::mt19937 rng(8);
  std::vector<int32_t> tokens(40);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % c.vocab_size);
  PrefillOptions first;
  first.capture_kv = true;
  ASSERT_OK_AND_ASSIGN(auto pre, model_->Prefill(std::span(tokens).first(30), first));

  // Two prefills of the same rest, with the prefix rows in two different orders.
  std::mt19937 r1(1), r2(2);
  PrefixSupplier s1{&pre, &c, &r1}, s2{&pre, &c, &r2};
  PrefillOptions o;
  o.start_pos = 30;
  o.column_sums = true;
  o.before_attention = std::ref(s1);
  ASSERT_OK_AND_ASSIGN(auto a, model_->Prefill(std::span(tokens).subspan(30), o));
  o.before_attention = std::ref(s2);
  ASSERT_OK_AND_ASSIGN(auto b, model_->Prefill(std::span(tokens).subspan(30), o));
  ASSERT_EQ(a.column_sums.size(), static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    ASSERT_EQ(a.column_sums[l].size(), static_cast<size_t>(c.n_heads));
    for (int h = 0; h < c.n_heads; ++h) {
      const int kvh = h / c.group();
      const auto& pa = s1.pos[l][kvh];
      const auto& pb = s2.pos[l][kvh];
      ASSERT_EQ(a.column_sums[l][h].size(), pa.size());
      std::vector<float> by_pos_a(30), by_pos_b(30);
      for (size_t j = 0; j < pa.size(); ++j) by_pos_a[pa[j]] = a.column_sums[l][h][j];
      for (size_t j = 0; j < pb.size(); ++j) by_pos_b[pb[j]] = b.column_sums[l][h][j];
      EXPECT_LT(MaxAbsDiff(by_pos_a.data(), by_pos_b.data(), 30), 1e-5);
      // 10 query rows, each spreading weight 1 over prefix + causal rows.
      const double total = std::accumulate(by_pos_a.begin(), by_pos_a.end(), 0.0);
      EXPECT_GT(total, 0.0);
      EXPECT_LT(total, 10.0);
    }
  }
}

TEST_P(HooksTest, SubsetsPerHeadAreAcceptedAndChangeTheResult) {
  const ModelConfig& c = model_->config();
  std::mt19937 rng(3);
  std::vector<int32_t> tokens(50);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % c.vocab_size);
  PrefillOptions first;
  first.capture_kv = true;
  first.kv_dtype = KvDType::kF16;
  ASSERT_OK_AND_ASSIGN(auto pre, model_->Prefill(std::span(tokens).first(40), first));
  PrefixSupplier all{&pre, &c, &rng}, half{&pre, &c, &rng, 0.5};
  PrefillOptions o;
  o.start_pos = 40;
  o.before_attention = std::ref(all);
  ASSERT_OK_AND_ASSIGN(auto a, model_->Prefill(std::span(tokens).subspan(40), o));
  o.before_attention = std::ref(half);
  ASSERT_OK_AND_ASSIGN(auto b, model_->Prefill(std::span(tokens).subspan(40), o));
  EXPECT_GT(MaxAbsDiff(a.logits.data(), b.logits.data(), a.logits.size()), 1e-6);
}

// ProjectQk from the residual stream the hook sees (view.x) gives the
// queries and keys the layer computed (view.q, view.k) for the first KV
// heads and their query groups: the same norm, projection and RoPE.
TEST_P(HooksTest, ProjectQkGivesTheQueriesAndKeysTheLayerComputes) {
  const ModelConfig& c = model_->config();
  std::mt19937 rng(5);
  std::vector<int32_t> tokens(12);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % c.vocab_size);
  const int hd = c.head_dim();
  int checked = 0;
  PrefillOptions o;
  o.start_pos = 7;
  o.before_attention = [&](const LayerView& view, LayerPrefix*) -> Status {
    if (view.x == nullptr) return Status::NotFound("no residual stream in the view");
    for (int heads = 1; heads <= c.n_kv_heads; ++heads) {
      std::vector<float> q, k;
      RETURN_IF_ERROR(model_->ProjectQk(view.layer, view.x, view.x_stride, view.n_new, view.start_pos, heads, &q, &k));
      const size_t qw = static_cast<size_t>(heads) * c.group() * hd, kw = static_cast<size_t>(heads) * hd;
      const size_t n = static_cast<size_t>(view.n_new);
      EXPECT_EQ(q.size(), n * qw);
      EXPECT_EQ(k.size(), n * kw);
      for (size_t i = 0; i < n && q.size() == n * qw; ++i) {
        EXPECT_LT(MaxAbsDiff(q.data() + i * qw, view.q + i * view.q_stride, qw), 1e-5) << "layer " << view.layer;
        EXPECT_LT(MaxAbsDiff(k.data() + i * kw, view.k + i * view.kv_stride, kw), 1e-5) << "layer " << view.layer;
      }
      ++checked;
    }
    return Status::Ok();
  };
  ASSERT_OK(model_->Prefill(tokens, o).status());
  EXPECT_EQ(checked, c.n_layers * c.n_kv_heads);

  std::vector<float> x(static_cast<size_t>(c.dim), 0.5f), q, k;
  EXPECT_THAT(model_->ProjectQk(c.n_layers, x.data(), c.dim, 1, 0, 1, &q, &k),
              StatusIs(StatusCode::kInvalidArgument, "layer"));
  EXPECT_THAT(model_->ProjectQk(0, x.data(), c.dim, 1, 0, c.n_kv_heads + 1, &q, &k),
              StatusIs(StatusCode::kInvalidArgument, "kv_heads"));
  EXPECT_THAT(model_->ProjectQk(0, x.data(), c.dim, 1, c.context_length, 1, &q, &k),
              StatusIs(StatusCode::kInvalidArgument, "context"));
}

INSTANTIATE_TEST_SUITE_P(MhaAndGqa, HooksTest,
                         ::testing::Values(std::make_pair(4, 4), std::make_pair(4, 2),
                                           std::make_pair(4, 1)));

TEST(HooksErrorsTest, BadInputIsRejectedWithAClearStatus) {
  auto m = Model::Random(testing::TinyConfig(), 1);
  ASSERT_THAT(m, IsOk());
  const Model& model = **m;
  std::vector<int32_t> tokens = {1, 2, 3};
  PrefillOptions o;
  EXPECT_THAT(model.Prefill(std::vector<int32_t>{1, 64}, o),
              StatusIs(StatusCode::kInvalidArgument, "token 64 at index 1"));
  EXPECT_THAT(model.Prefill({}, o), StatusIs(StatusCode::kInvalidArgument));
  o.start_pos = 126;
  EXPECT_THAT(model.Prefill(tokens, o), StatusIs(StatusCode::kInvalidArgument, "context of 128"));

  std::vector<float> kv(16 * 8, 0.0f);
  std::vector<int32_t> pos = {0, 5};
  o.start_pos = 5;  // position 5 is not before start_pos
  o.before_attention = [&](const LayerView&, LayerPrefix* p) {
    p->heads.assign(2, KvRows{kv.data(), kv.data(), KvDType::kF32, 2, 0, 0, pos.data()});
    return Status::Ok();
  };
  EXPECT_THAT(model.Prefill(tokens, o), StatusIs(StatusCode::kInvalidArgument, "position 5"));
  o.before_attention = [&](const LayerView&, LayerPrefix* p) {
    p->heads.assign(3, KvRows{kv.data(), kv.data(), KvDType::kF32, 1, 0, 0, nullptr});
    return Status::Ok();
  };
  EXPECT_THAT(model.Prefill(tokens, o), StatusIs(StatusCode::kInvalidArgument, "3 KV heads"));
  int calls = 0;
  o.before_attention = [&](const LayerView& v, LayerPrefix*) {
    ++calls;
    return v.layer == 1 ? Status::IOError("chunk read failed") : Status::Ok();
  };
  EXPECT_THAT(model.Prefill(tokens, o), StatusIs(StatusCode::kIOError, "chunk read failed"));
  EXPECT_EQ(calls, 2);  // aborted at the failing layer
}

}  // namespace
}  // namespace tierkv

// The forward pass. One Prefill() call processes T new tokens as a batch:
// every projection is one matrix-matrix product over the T rows.
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>

#include "kernels/attention.h"
#include "kernels/fp16.h"
#include "kernels/elementwise.h"
#include "kernels/matmul.h"
#include "model/weights.h"
#include "util/thread_pool.h"

namespace tierkv {

Status ModelConfig::CheckArchitecture(const std::string& arch) {
  if (arch == "llama" || arch == "mistral" || arch == "qwen2") return Status::Ok();
  return Status::InvalidArgument("model architecture '" + arch + "' is not supported (llama, mistral, qwen2)");
}

Status ModelConfig::Validate() const {
  auto bad = [](const std::string& field, long v, const std::string& why) {
    return Status::InvalidArgument("model config field " + field + "=" + std::to_string(v) + " " +
                                   why);
  };
  RETURN_IF_ERROR(CheckArchitecture(architecture));
  if (dim <= 0 || dim > (1 << 16)) return bad("dim", dim, "must be in [1, 65536]");
  if (hidden_dim <= 0 || hidden_dim > (1 << 18)) return bad("hidden_dim", hidden_dim, "must be in [1, 262144]");
  if (n_layers <= 0 || n_layers > 1024) return bad("n_layers", n_layers, "must be in [1, 1024]");
  if (n_heads <= 0 || n_heads > dim) return bad("n_heads", n_heads, "must be in [1, dim]");
  if (dim % n_heads != 0) return bad("n_heads", n_heads, "must divide dim=" + std::to_string(dim));
  if ((dim / n_heads) % 2 != 0) return bad("n_heads", n_heads, "gives an odd head size (RoPE needs pairs)");
  if (n_kv_heads <= 0 || n_kv_heads > n_heads || n_heads % n_kv_heads != 0) {
    return bad("n_kv_heads", n_kv_heads, "must divide n_heads=" + std::to_string(n_heads));
  }
  if (vocab_size <= 0 || vocab_size > (1 << 22)) return bad("vocab_size", vocab_size, "must be in [1, 4194304]");
  if (context_length <= 0 || context_length > (1 << 20)) {
    return bad("context_length", context_length, "must be in [1, 1048576]");
  }
  if (!(rope_theta > 0.0f) || !std::isfinite(rope_theta)) {
    return Status::InvalidArgument("model config field rope_theta must be positive and finite");
  }
  if (!(norm_eps > 0.0f) || !(norm_eps < 1.0f)) {
    return Status::InvalidArgument("model config field norm_eps must be in (0, 1)");
  }
  return Status::Ok();
}

std::string ModelConfig::ToString() const {
  return architecture + " dim=" + std::to_string(dim) + " hidden=" + std::to_string(hidden_dim) +
         " layers=" + std::to_string(n_layers) + " heads=" + std::to_string(n_heads) +
         " kv_heads=" + std::to_string(n_kv_heads) + " head_dim=" + std::to_string(head_dim()) +
         " vocab=" + std::to_string(vocab_size) + " context=" + std::to_string(context_length) +
         (rope_neox ? " rope=neox" : "");
}

namespace model {

Status CheckFinite(const std::string& name, const std::string& tensor,
                   const std::vector<float>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      return Status::Corruption(name + ": tensor " + tensor + " holds a non-finite value at index " +
                                std::to_string(i) + " (corrupted file?)");
    }
  }
  return Status::Ok();
}

std::vector<std::pair<std::string, const WeightMatrix*>> ModelWeights::Matrices() const {
  std::vector<std::pair<std::string, const WeightMatrix*>> out = {{"token_embd.weight", &tok_embd}};
  if (!output.empty()) out.push_back({"output.weight", &output});
  for (size_t l = 0; l < layers.size(); ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const LayerWeights& L = layers[l];
    out.push_back({p + "attn_{q,k,v}.weight", &L.wqkv});
    out.push_back({p + "attn_output.weight", &L.wo});
    out.push_back({p + "ffn_{gate,up}.weight", &L.w13});
    out.push_back({p + "ffn_down.weight", &L.w2});
  }
  return out;
}

std::vector<std::pair<std::string, WeightMatrix*>> ModelWeights::Matrices() {
  std::vector<std::pair<std::string, WeightMatrix*>> out;
  for (auto& [tensor, m] : std::as_const(*this).Matrices()) out.push_back({tensor, const_cast<WeightMatrix*>(m)});
  return out;
}

namespace {

void RmsNorm(const float* x, const float* w, int n, float eps, float* out) {
  float ss = 0.0f;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  ss = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int i = 0; i < n; ++i) out[i] = w[i] * (ss * x[i]);
}

// Row-wise work in one contiguous range of rows per thread.
template <typename F>
void ForRows(ThreadPool* pool, int rows, const F& f) {
  const int parts = std::min(rows, pool->workers() + 1);
  pool->ParallelFor(parts, [&](int p) {
    const int r0 = static_cast<int>(static_cast<int64_t>(rows) * p / parts);
    const int r1 = static_cast<int>(static_cast<int64_t>(rows) * (p + 1) / parts);
    for (int i = r0; i < r1; ++i) f(i);
  });
}

class Transformer final : public Model {
 public:
  Transformer(LoadedModel m, uint64_t hash)
      : config_(m.config), w_(std::move(m.weights)), vocab_(std::move(m.vocab)),
        format_(std::move(m.format)), hash_(hash) {
    // RoPE table as llama2.c computes it (float arithmetic); Llama 3.1's
    // frequency factors divide the frequencies, as llama.cpp applies them.
    const int half = config_.head_dim() / 2;
    rope_cos_.resize(static_cast<size_t>(config_.context_length) * half);
    rope_sin_.resize(rope_cos_.size());
    for (int pos = 0; pos < config_.context_length; ++pos) {
      for (int i = 0; i < half; ++i) {
        float freq = 1.0f / std::pow(config_.rope_theta,
                                     static_cast<float>(2 * i) / static_cast<float>(config_.head_dim()));
        if (!w_.rope_freq_factors.empty()) freq /= w_.rope_freq_factors[i];
        float val = static_cast<float>(pos) * freq;
        rope_cos_[static_cast<size_t>(pos) * half + i] = std::cos(val);
        rope_sin_[static_cast<size_t>(pos) * half + i] = std::sin(val);
      }
    }
  }

  const ModelConfig& config() const override { return config_; }
  const std::string& format() const override { return format_; }
  uint64_t content_hash() const override { return hash_; }
  WeightStorage weight_storage() const override {
    return w_.file ? WeightStorage::kMapped : WeightStorage::kFp32;
  }
  size_t weight_bytes() const override;
  const std::optional<Vocab>& embedded_vocab() const override { return vocab_; }

  Result<PrefillResult> Prefill(std::span<const int32_t> tokens,
                                const PrefillOptions& opt) const override;
  Result<std::vector<PrefillResult>> PrefillBatch(std::span<const BatchItem> items) const override;
  Status ProjectQk(int layer, const float* x, size_t x_stride, int n, int start_pos, int kv_heads,
                   std::vector<float>* q, std::vector<float>* k) const override;

 private:
  // One sequence of a forward pass: its rows of the batch and its result.
  struct Part {
    std::span<const int32_t> tokens;
    const PrefillOptions* opt = nullptr;
    int row0 = 0;  // its first row in the batch's buffers
    int T = 0;
    LayerPrefix prefix;  // the layer's, from its hook
    PrefillResult res;
  };
  // The activations of every new token of every sequence, row-major.
  struct Batch {
    Batch(const ModelConfig& c, int n);
    int rows;
    int qkv_w;  // dim + 2 kv_dim: Q, K, V of a row side by side
    std::vector<float> x, xb, qkv, att, h13;
    std::vector<int> pos;  // each row's position
  };
  Status CheckTokens(std::span<const int32_t> tokens, const PrefillOptions& opt) const;
  // Norm, Q/K/V over all rows, RoPE, each sequence's K/V captured and its
  // hook's prefix rows, attention, x += att Wo^T.
  Status AttentionBlock(int l, Batch& b, std::vector<Part>& parts) const;
  void CaptureKv(int l, const Batch& b, Part& part) const;
  void Attend(int l, Batch& b, std::vector<Part>& parts) const;
  void FeedForward(int l, Batch& b) const;
  void Logits(Batch& b, std::vector<Part>& parts) const;

  void Rope(float* x, int n_heads_here, int pos) const {
    const int hd = config_.head_dim();
    const int half = hd / 2;
    const float* c = rope_cos_.data() + static_cast<size_t>(pos) * half;
    const float* s = rope_sin_.data() + static_cast<size_t>(pos) * half;
    // Pair i: dimensions (2i, 2i+1), or (i, i + half) for neox.
    const int stride = config_.rope_neox ? 1 : 2, other = config_.rope_neox ? half : 1;
    for (int h = 0; h < n_heads_here; ++h) {
      float* v = x + static_cast<size_t>(h) * hd;
      for (int i = 0; i < half; ++i) {
        float* a = v + stride * i;
        const float v0 = a[0], v1 = a[other];
        a[0] = v0 * c[i] - v1 * s[i];
        a[other] = v0 * s[i] + v1 * c[i];
      }
    }
  }

  // A row's first q_heads query heads and first k_heads key heads, as the
  // layer's projection left them: their biases (if any) added, then RoPE at
  // `pos`. The forward pass and ProjectQk both finish Q and K with it.
  void BiasAndRope(const LayerWeights& L, float* q, int q_heads, float* k, int k_heads, int pos) const {
    if (!L.bqkv.empty()) {
      const int hd = config_.head_dim();
      for (int j = 0; j < q_heads * hd; ++j) q[j] += L.bqkv[j];
      for (int j = 0; j < k_heads * hd; ++j) k[j] += L.bqkv[config_.dim + j];
    }
    Rope(q, q_heads, pos);
    Rope(k, k_heads, pos);
  }

  Status CheckPrefix(const LayerPrefix& p, int layer, int start_pos) const;

  ModelConfig config_;
  ModelWeights w_;
  std::optional<Vocab> vocab_;
  std::string format_;
  uint64_t hash_;
  std::vector<float> rope_cos_, rope_sin_;
};

Status Transformer::CheckPrefix(const LayerPrefix& p, int layer, int start_pos) const {
  if (p.heads.empty()) return Status::Ok();
  const std::string where = "prefix rows of layer " + std::to_string(layer);
  if (static_cast<int>(p.heads.size()) != config_.n_kv_heads) {
    return Status::InvalidArgument(where + ": " + std::to_string(p.heads.size()) +
                                   " KV heads given, the model has " +
                                   std::to_string(config_.n_kv_heads));
  }
  const size_t hd = static_cast<size_t>(config_.head_dim());
  for (size_t h = 0; h < p.heads.size(); ++h) {
    const KvRows& r = p.heads[h];
    if (r.count == 0) continue;
    if (r.k == nullptr || r.v == nullptr) {
      return Status::InvalidArgument(where + ", head " + std::to_string(h) + ": null K or V");
    }
    if ((r.k_stride != 0 && r.k_stride < hd) || (r.v_stride != 0 && r.v_stride < hd)) {
      return Status::InvalidArgument(where + ", head " + std::to_string(h) +
                                     ": row stride smaller than head_dim");
    }
    if (r.count > static_cast<size_t>(start_pos)) {
      return Status::InvalidArgument(where + ", head " + std::to_string(h) + ": " +
                                     std::to_string(r.count) + " rows but only " +
                                     std::to_string(start_pos) + " positions precede start_pos");
    }
    if (r.positions != nullptr) {
      for (size_t i = 0; i < r.count; ++i) {
        if (r.positions[i] < 0 || r.positions[i] >= start_pos) {
          return Status::InvalidArgument(where + ", head " + std::to_string(h) + ": row " +
                                         std::to_string(i) + " has position " +
                                         std::to_string(r.positions[i]) +
                                         ", outside [0, start_pos=" + std::to_string(start_pos) +
                                         ")");
        }
      }
    }
  }
  return Status::Ok();
}

Status Transformer::CheckTokens(std::span<const int32_t> tokens, const PrefillOptions& opt) const {
  const ModelConfig& c = config_;
  const int T = static_cast<int>(tokens.size());
  if (T == 0) return Status::InvalidArgument("prefill of zero tokens");
  if (opt.start_pos < 0) return Status::InvalidArgument("start_pos must be >= 0");
  if (static_cast<int64_t>(opt.start_pos) + T > c.context_length) {
    return Status::InvalidArgument("positions " + std::to_string(opt.start_pos) + ".." +
                                   std::to_string(opt.start_pos + T - 1) +
                                   " exceed the model's context of " +
                                   std::to_string(c.context_length) + " tokens");
  }
  for (int i = 0; i < T; ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size) {
      return Status::InvalidArgument("token " + std::to_string(tokens[i]) + " at index " +
                                     std::to_string(i) + " is outside the vocabulary [0, " +
                                     std::to_string(c.vocab_size) + ")");
    }
  }
  return Status::Ok();
}

Result<PrefillResult> Transformer::Prefill(std::span<const int32_t> tokens,
                                           const PrefillOptions& opt) const {
  const BatchItem one{tokens, opt};
  ASSIGN_OR_RETURN(std::vector<PrefillResult> r, PrefillBatch(std::span(&one, 1)));
  return std::move(r[0]);
}

Result<std::vector<PrefillResult>> Transformer::PrefillBatch(std::span<const BatchItem> items) const {
  const ModelConfig& c = config_;
  if (items.empty()) return Status::InvalidArgument("prefill of zero sequences");
  std::vector<Part> parts(items.size());
  int rows = 0;
  for (size_t p = 0; p < items.size(); ++p) {
    RETURN_IF_ERROR(CheckTokens(items[p].tokens, items[p].options));
    Part& part = parts[p];
    part.tokens = items[p].tokens;
    part.opt = &items[p].options;
    part.row0 = rows;
    part.T = static_cast<int>(part.tokens.size());
    rows += part.T;
    part.res.n_tokens = part.T;
    part.res.kv_dtype = part.opt->kv_dtype;
    if (part.opt->capture_kv) part.res.kv.resize(c.n_layers);
    if (part.opt->column_sums) part.res.column_sums.resize(c.n_layers);
  }
  Batch b(c, rows);
  for (const Part& part : parts) {
    for (int i = 0; i < part.T; ++i) {
      const size_t r = static_cast<size_t>(part.row0 + i);
      b.pos[r] = part.opt->start_pos + i;
      w_.tok_embd.DequantizeRows(part.tokens[i], 1, &b.x[r * c.dim]);
    }
  }
  for (int l = 0; l < c.n_layers; ++l) {
    RETURN_IF_ERROR(AttentionBlock(l, b, parts));
    FeedForward(l, b);
  }
  Logits(b, parts);
  std::vector<PrefillResult> out;
  out.reserve(parts.size());
  for (Part& part : parts) out.push_back(std::move(part.res));
  return out;
}

size_t Transformer::weight_bytes() const {
  size_t floats = w_.output_norm.size() + w_.rope_freq_factors.size();
  for (const LayerWeights& L : w_.layers) floats += L.attn_norm.size() + L.ffn_norm.size() + L.bqkv.size();
  size_t b = floats * sizeof(float);
  for (const auto& [tensor, m] : w_.Matrices()) b += m->bytes();
  return b;
}

Transformer::Batch::Batch(const ModelConfig& c, int n)
    : rows(n), qkv_w(c.dim + 2 * c.kv_dim()), x(static_cast<size_t>(n) * c.dim),
      xb(x.size()), qkv(static_cast<size_t>(n) * qkv_w), att(x.size()),
      h13(static_cast<size_t>(n) * 2 * c.hidden_dim), pos(n) {}

Status Transformer::AttentionBlock(int l, Batch& b, std::vector<Part>& parts) const {
  const ModelConfig& c = config_;
  const LayerWeights& L = w_.layers[l];
  const int dim = c.dim, qkv_w = b.qkv_w;
  ThreadPool* pool = ThreadPool::Compute();
  ForRows(pool, b.rows, [&](int i) {
    RmsNorm(&b.x[i * static_cast<size_t>(dim)], L.attn_norm.data(), dim, c.norm_eps,
            &b.xb[i * static_cast<size_t>(dim)]);
  });
  L.wqkv.MatMul(pool, b.rows, b.xb.data(), dim, 0.0f, b.qkv.data(), qkv_w);
  ForRows(pool, b.rows, [&](int i) {
    float* row = &b.qkv[i * static_cast<size_t>(qkv_w)];
    BiasAndRope(L, row, c.n_heads, row + dim, c.n_kv_heads, b.pos[i]);
    if (!L.bqkv.empty()) {  // V's biases
      for (int j = dim + c.kv_dim(); j < qkv_w; ++j) row[j] += L.bqkv[j];
    }
  });
  for (Part& part : parts) {
    if (part.opt->capture_kv) CaptureKv(l, b, part);
    part.prefix.heads.clear();
    if (part.opt->before_attention) {
      float* q = b.qkv.data() + static_cast<size_t>(part.row0) * qkv_w;
      LayerView view{l, part.T, part.opt->start_pos, q, static_cast<size_t>(qkv_w), q + dim,
                     q + dim + c.kv_dim(), static_cast<size_t>(qkv_w),
                     b.x.data() + static_cast<size_t>(part.row0) * dim, static_cast<size_t>(dim)};
      RETURN_IF_ERROR(part.opt->before_attention(view, &part.prefix));
      RETURN_IF_ERROR(CheckPrefix(part.prefix, l, part.opt->start_pos));
    }
  }
  Attend(l, b, parts);
  // x += att · Wo^T
  L.wo.MatMul(pool, b.rows, b.att.data(), dim, 1.0f, b.x.data(), dim);
  return Status::Ok();
}

Status Transformer::ProjectQk(int layer, const float* x, size_t x_stride, int n, int start_pos,
                              int kv_heads, std::vector<float>* q, std::vector<float>* k) const {
  const ModelConfig& c = config_;
  if (layer < 0 || layer >= c.n_layers) {
    return Status::InvalidArgument("ProjectQk: layer " + std::to_string(layer) + " of " + std::to_string(c.n_layers));
  }
  if (kv_heads < 1 || kv_heads > c.n_kv_heads) {
    return Status::InvalidArgument("ProjectQk: kv_heads " + std::to_string(kv_heads) + " of " +
                                   std::to_string(c.n_kv_heads));
  }
  if (n < 0 || start_pos < 0 || start_pos + n > c.context_length) {
    return Status::InvalidArgument("ProjectQk: positions " + std::to_string(start_pos) + " + " + std::to_string(n) +
                                   " beyond the context of " + std::to_string(c.context_length));
  }
  const LayerWeights& L = w_.layers[layer];
  const int dim = c.dim, hd = c.head_dim();
  const int qw = kv_heads * c.group() * hd, kw = kv_heads * hd;  // wq's first rows, wk's first rows
  const size_t D = static_cast<size_t>(dim), QW = static_cast<size_t>(qw), KW = static_cast<size_t>(kw);
  std::vector<float> xn(static_cast<size_t>(n) * D);
  for (int i = 0; i < n; ++i) RmsNorm(x + i * x_stride, L.attn_norm.data(), dim, c.norm_eps, &xn[i * D]);
  q->assign(static_cast<size_t>(n) * QW, 0.0f);
  k->assign(static_cast<size_t>(n) * KW, 0.0f);
  if (n == 0) return Status::Ok();
  L.wqkv.MatMul(nullptr, n, xn.data(), D, 0, qw, 0.0f, q->data(), QW);
  L.wqkv.MatMul(nullptr, n, xn.data(), D, dim, kw, 0.0f, k->data(), KW);
  for (int i = 0; i < n; ++i) {
    BiasAndRope(L, q->data() + i * QW, kv_heads * c.group(), k->data() + i * KW, kv_heads, start_pos + i);
  }
  return Status::Ok();
}

void Transformer::CaptureKv(int l, const Batch& b, Part& part) const {
  const int kvd = config_.kv_dim();
  const KvDType dt = part.opt->kv_dtype;
  const size_t es = KvDTypeSize(dt);
  auto& out = part.res.kv[l];
  out.k.resize(static_cast<size_t>(part.T) * kvd * es);
  out.v.resize(out.k.size());
  for (int i = 0; i < part.T; ++i) {
    const float* kr = b.qkv.data() + static_cast<size_t>(part.row0 + i) * b.qkv_w + config_.dim;
    const float* vr = kr + kvd;
    if (dt == KvDType::kF32) {
      std::memcpy(out.k.data() + i * kvd * es, kr, kvd * es);
      std::memcpy(out.v.data() + i * kvd * es, vr, kvd * es);
    } else {
      kernels::FloatToHalfN(kr, reinterpret_cast<uint16_t*>(out.k.data()) + i * kvd, kvd);
      kernels::FloatToHalfN(vr, reinterpret_cast<uint16_t*>(out.v.data()) + i * kvd, kvd);
    }
  }
}

void Transformer::Attend(int l, Batch& b, std::vector<Part>& parts) const {
  const ModelConfig& c = config_;
  const int H = c.n_kv_heads, hd = c.head_dim(), G = c.group();
  // One task per (sequence, KV head): each writes only its own rows'
  // output columns, column sums and counts.
  const size_t P = parts.size();
  std::vector<std::vector<float>> colsums(P * H);
  std::vector<uint64_t> weights(P * H), near_zero(P * H);
  ThreadPool::Compute()->ParallelFor(static_cast<int>(P * H), [&](int t) {
    const Part& part = parts[t / H];
    const int g = t % H;
    const size_t row0 = static_cast<size_t>(part.row0);
    thread_local kernels::AttentionScratch scratch;
    kernels::AttentionArgs a;
    a.n_new = part.T;
    a.head_dim = hd;
    a.group = G;
    a.q = b.qkv.data() + row0 * b.qkv_w + static_cast<size_t>(g) * G * hd;
    a.q_stride = b.qkv_w;
    a.k_new = b.qkv.data() + row0 * b.qkv_w + c.dim + static_cast<size_t>(g) * hd;
    a.v_new = a.k_new + c.kv_dim();
    a.kv_new_stride = b.qkv_w;
    if (!part.prefix.heads.empty()) a.prefix = part.prefix.heads[g];
    a.out = b.att.data() + row0 * c.dim + static_cast<size_t>(g) * G * hd;
    a.out_stride = c.dim;
    if (part.opt->column_sums && a.prefix.count > 0) {
      colsums[t].assign(a.prefix.count * G, 0.0f);
      a.colsum = colsums[t].data();
    }
    if (part.opt->attention_sparsity) {
      a.weights = &weights[t];
      a.near_zero = &near_zero[t];
    }
    kernels::AttendKvGroup(a, &scratch);
  });
  for (size_t p = 0; p < P; ++p) {
    Part& part = parts[p];
    if (part.opt->column_sums) {
      auto& sums = part.res.column_sums[l];
      sums.resize(c.n_heads);
      for (int g = 0; g < H; ++g) {
        const size_t n = part.prefix.heads.empty() ? 0 : part.prefix.heads[g].count;
        for (int j = 0; j < G; ++j) {
          auto& out = sums[g * G + j];
          out.assign(n, 0.0f);
          if (n > 0) std::copy(colsums[p * H + g].begin() + j * n, colsums[p * H + g].begin() + (j + 1) * n, out.begin());
        }
      }
    }
    if (part.opt->attention_sparsity) {
      uint64_t w = 0, z = 0;
      for (int g = 0; g < H; ++g) {
        w += weights[p * H + g];
        z += near_zero[p * H + g];
      }
      part.res.sparsity.push_back(w ? static_cast<double>(z) / static_cast<double>(w) : 0.0);
    }
  }
}

void Transformer::FeedForward(int l, Batch& b) const {
  const ModelConfig& c = config_;
  const LayerWeights& L = w_.layers[l];
  const int dim = c.dim, hid = c.hidden_dim;
  ThreadPool* pool = ThreadPool::Compute();
  ForRows(pool, b.rows, [&](int i) {
    RmsNorm(&b.x[i * static_cast<size_t>(dim)], L.ffn_norm.data(), dim, c.norm_eps,
            &b.xb[i * static_cast<size_t>(dim)]);
  });
  L.w13.MatMul(pool, b.rows, b.xb.data(), dim, 0.0f, b.h13.data(), 2 * hid);
  ForRows(pool, b.rows, [&](int i) {  // SwiGLU: silu(w1 x) * (w3 x)
    float* r = &b.h13[i * static_cast<size_t>(2 * hid)];
    kernels::SiluMul(r, r + hid, hid);
  });
  L.w2.MatMul(pool, b.rows, b.h13.data(), 2 * hid, 1.0f, b.x.data(), dim);
}

void Transformer::Logits(Batch& b, std::vector<Part>& parts) const {
  const ModelConfig& c = config_;
  const int dim = c.dim;
  // The rows that want logits, gathered into xb for one product.
  std::vector<int> rows;
  for (const Part& part : parts) {
    if (part.opt->logits == LogitsMode::kNone) continue;
    const int first = part.opt->logits == LogitsMode::kAll ? 0 : part.T - 1;
    for (int i = first; i < part.T; ++i) rows.push_back(part.row0 + i);
  }
  if (rows.empty()) return;
  for (size_t k = 0; k < rows.size(); ++k) {
    RmsNorm(&b.x[rows[k] * static_cast<size_t>(dim)], w_.output_norm.data(), dim, c.norm_eps,
            &b.xb[k * static_cast<size_t>(dim)]);
  }
  const WeightMatrix& wout = w_.output.empty() ? w_.tok_embd : w_.output;
  const size_t V = static_cast<size_t>(c.vocab_size);
  std::vector<float> all(rows.size() * V);
  wout.MatMul(ThreadPool::Compute(), static_cast<int>(rows.size()), b.xb.data(), dim, 0.0f, all.data(), V);
  size_t at = 0;
  for (Part& part : parts) {
    if (part.opt->logits == LogitsMode::kNone) continue;
    const size_t n = part.opt->logits == LogitsMode::kAll ? static_cast<size_t>(part.T) : 1;
    if (parts.size() == 1) {
      part.res.logits = std::move(all);
    } else {
      part.res.logits.assign(all.begin() + at * V, all.begin() + (at + n) * V);
    }
    at += n;
  }
}

}  // namespace

Result<std::unique_ptr<Model>> MakeTransformer(LoadedModel m, uint64_t content_hash) {
  RETURN_IF_ERROR(m.config.Validate());
  const ModelConfig& c = m.config;
  const size_t dim = c.dim, kvd = c.kv_dim(), hid = c.hidden_dim, V = c.vocab_size;
  auto check = [&](const std::string& name, const std::vector<float>& v, size_t want) {
    if (v.size() != want) {
      return Status::InvalidArgument("tensor " + name + " has " + std::to_string(v.size()) +
                                     " elements, expected " + std::to_string(want));
    }
    return Status::Ok();
  };
  auto check_matrix = [&](const std::string& name, const WeightMatrix& w, size_t rows, size_t cols) {
    if (static_cast<size_t>(w.rows()) != rows || static_cast<size_t>(w.cols()) != cols) {
      return Status::InvalidArgument("tensor " + name + " is " + std::to_string(w.rows()) + " × " +
                                     std::to_string(w.cols()) + ", expected " + std::to_string(rows) + " × " +
                                     std::to_string(cols));
    }
    return Status::Ok();
  };
  RETURN_IF_ERROR(check_matrix("token_embd", m.weights.tok_embd, V, dim));
  RETURN_IF_ERROR(check("output_norm", m.weights.output_norm, dim));
  if (!m.weights.rope_freq_factors.empty()) {
    RETURN_IF_ERROR(check("rope_freqs", m.weights.rope_freq_factors, static_cast<size_t>(c.head_dim() / 2)));
  }
  if (!m.weights.output.empty()) RETURN_IF_ERROR(check_matrix("output", m.weights.output, V, dim));
  if (m.weights.layers.size() != static_cast<size_t>(c.n_layers)) {
    return Status::InvalidArgument("model has " + std::to_string(m.weights.layers.size()) +
                                   " layers of weights, config says " +
                                   std::to_string(c.n_layers));
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const auto& L = m.weights.layers[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    RETURN_IF_ERROR(check(p + "attn_norm", L.attn_norm, dim));
    RETURN_IF_ERROR(check_matrix(p + "attn_qkv", L.wqkv, dim + 2 * kvd, dim));
    if (!L.bqkv.empty()) RETURN_IF_ERROR(check(p + "attn_qkv.bias", L.bqkv, dim + 2 * kvd));
    RETURN_IF_ERROR(check_matrix(p + "attn_output", L.wo, dim, dim));
    RETURN_IF_ERROR(check(p + "ffn_norm", L.ffn_norm, dim));
    RETURN_IF_ERROR(check_matrix(p + "ffn_gate_up", L.w13, 2 * hid, dim));
    RETURN_IF_ERROR(check_matrix(p + "ffn_down", L.w2, dim, hid));
  }
  if (m.vocab && static_cast<int>(m.vocab->pieces.size()) != c.vocab_size) {
    return Status::InvalidArgument("embedded tokenizer has " +
                                   std::to_string(m.vocab->pieces.size()) +
                                   " tokens, the model's vocabulary is " +
                                   std::to_string(c.vocab_size));
  }
  return std::unique_ptr<Model>(new Transformer(std::move(m), content_hash));
}

}  // namespace model

const char* WeightStorageName(WeightStorage s) {
  switch (s) {
    case WeightStorage::kAuto: return "auto";
    case WeightStorage::kFp32: return "fp32";
    case WeightStorage::kMapped: return "mapped";
  }
  return "?";
}

Result<WeightStorage> ParseWeightStorage(std::string_view name) {
  for (WeightStorage s : {WeightStorage::kAuto, WeightStorage::kFp32, WeightStorage::kMapped}) {
    if (name == WeightStorageName(s)) return s;
  }
  return Status::InvalidArgument("weights '" + std::string(name) + "' is not one of auto, fp32, mapped");
}

Result<std::unique_ptr<Model>> Model::Load(const std::string& path, FileSystem* fs) {
  return Load(path, ModelLoadOptions{}, fs);
}

Result<std::unique_ptr<Model>> Model::Load(const std::string& path, const ModelLoadOptions& options,
                                           FileSystem* fs) {
  auto bytes = MapOrReadFile(fs, path);
  if (!bytes.ok()) return bytes.status().WithContext("cannot read model file");
  std::shared_ptr<const FileBytes> file = std::move(*bytes);
  const std::string_view d = file->data();
  const uint64_t hash = XXH3_64bits(d.data(), d.size());
  Result<model::LoadedModel> loaded = d.size() >= 4 && std::memcmp(d.data(), "GGUF", 4) == 0
                                          ? model::ParseGgufModel(path, file, options.weights)
                                          : model::ParseLlama2c(path, d);
  if (!loaded.ok()) return loaded.status();
  auto m = model::MakeTransformer(std::move(*loaded), hash);
  if (!m.ok()) return m.status().WithContext(path);
  return m;
}

Result<std::unique_ptr<Model>> Model::Random(const ModelConfig& config, uint64_t seed) {
  RETURN_IF_ERROR(config.Validate());
  model::LoadedModel m;
  m.config = config;
  m.format = "random";
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  auto fill = [&](std::vector<float>& v, size_t n) {
    v.resize(n);
    for (auto& e : v) e = nd(rng);
  };
  const size_t dim = config.dim, kvd = config.kv_dim(), hid = config.hidden_dim;
  auto matrix = [&](size_t rows, size_t cols) {
    std::vector<float> v;
    fill(v, rows * cols);
    return model::WeightMatrix::Floats(std::move(v), static_cast<int>(rows), static_cast<int>(cols));
  };
  m.weights.tok_embd = matrix(config.vocab_size, dim);
  m.weights.output_norm.assign(dim, 1.0f);
  m.weights.layers.resize(config.n_layers);
  for (auto& L : m.weights.layers) {
    L.attn_norm.assign(dim, 1.0f);
    L.ffn_norm.assign(dim, 1.0f);
    L.wqkv = matrix(dim + 2 * kvd, dim);
    L.wo = matrix(dim, dim);
    L.w13 = matrix(2 * hid, dim);
    L.w2 = matrix(dim, hid);
  }
  const std::string shape = config.ToString();
  const uint64_t hash = XXH3_64bits_withSeed(shape.data(), shape.size(), seed);
  return model::MakeTransformer(std::move(m), hash);
}

}  // namespace tierkv

// llama2.c checkpoints, legacy format (version 0): seven int32 header fields,
// then fp32 tensors. The format has no magic, so the header is validated
// field by field and the file size must match the shape exactly.
#include <cstring>

#include "model/weights.h"

namespace tierkv::model {
namespace {

constexpr uint32_t kLlama2cMagic = 0x616b3432;  // "ak42", versioned exports

}  // namespace

Result<LoadedModel> ParseLlama2c(const std::string& name, std::string_view data) {
  constexpr size_t kHeader = 7 * sizeof(int32_t);
  if (data.size() < kHeader) {
    return Status::Corruption(name + ": not a GGUF file and too short (" +
                              std::to_string(data.size()) +
                              " bytes) for a llama2.c checkpoint header");
  }
  int32_t h[7];
  std::memcpy(h, data.data(), kHeader);
  if (static_cast<uint32_t>(h[0]) == kLlama2cMagic) {
    return Status::InvalidArgument(name + ": llama2.c versioned export (magic ak42, version " +
                                   std::to_string(h[1]) +
                                   ") is not supported; export with version 0 or convert to GGUF");
  }
  static constexpr const char* kFields[7] = {"dim",        "hidden_dim", "n_layers",
                                             "n_heads",    "n_kv_heads", "vocab_size",
                                             "seq_len"};
  for (int i = 0; i < 7; ++i) {
    if (h[i] == 0 || (h[i] < 0 && i != 5)) {
      return Status::Corruption(name + ": not a GGUF file (no GGUF magic) and not a llama2.c "
                                       "checkpoint: header field " +
                                std::string(kFields[i]) + "=" + std::to_string(h[i]) +
                                " is invalid");
    }
  }
  LoadedModel m;
  m.format = "llama2c";
  ModelConfig& c = m.config;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  const bool shared = h[5] > 0;
  c.vocab_size = h[5] > 0 ? h[5] : -h[5];
  c.context_length = h[6];
  if (Status s = c.Validate(); !s.ok()) {
    return Status::Corruption(name + ": not a GGUF file (no GGUF magic) and not a valid llama2.c "
                                     "checkpoint: " + s.message());
  }
  const uint64_t dim = c.dim, hid = c.hidden_dim, L = c.n_layers, kvd = c.kv_dim(),
                 V = c.vocab_size, hd = c.head_dim(), S = c.context_length;
  const uint64_t floats = V * dim + L * dim + L * dim * dim + 2 * L * dim * kvd + L * dim * dim +
                          L * dim + 3 * L * dim * hid + dim + S * hd + (shared ? 0 : V * dim);
  const uint64_t want = kHeader + floats * 4;
  if (data.size() != want) {
    return Status::Corruption(
        name + ": llama2.c checkpoint is " +
        std::string(data.size() < want ? "truncated" : "longer than its header says") + ": " +
        std::to_string(data.size()) + " bytes, the header's shape (" + c.ToString() +
        (shared ? ", shared classifier" : ", separate classifier") + ") needs " +
        std::to_string(want));
  }

  const float* p = reinterpret_cast<const float*>(data.data() + kHeader);
  auto take = [&p](uint64_t n) {
    std::vector<float> v(p, p + n);
    p += n;
    return v;
  };
  // Per-layer tensors are stored layer-major per kind: all layers' rms_att, then all wq, ...
  m.weights.tok_embd = WeightMatrix::Floats(take(V * dim), static_cast<int>(V), static_cast<int>(dim));
  auto rms_att = take(L * dim);
  auto wq = take(L * dim * dim);
  auto wk = take(L * kvd * dim);
  auto wv = take(L * kvd * dim);
  auto wo = take(L * dim * dim);
  auto rms_ffn = take(L * dim);
  auto w1 = take(L * hid * dim);
  auto w2 = take(L * dim * hid);
  auto w3 = take(L * hid * dim);
  m.weights.output_norm = take(dim);
  p += S * hd;  // freq_cis_real and freq_cis_imag: recomputed, as llama2.c does
  if (!shared) m.weights.output = WeightMatrix::Floats(take(V * dim), static_cast<int>(V), static_cast<int>(dim));

  auto slice = [](const std::vector<float>& v, uint64_t l, uint64_t n) {
    return std::vector<float>(v.begin() + l * n, v.begin() + (l + 1) * n);
  };
  m.weights.layers.resize(L);
  auto matrix = [](std::vector<float> v, uint64_t rows, uint64_t cols) {
    return WeightMatrix::Floats(std::move(v), static_cast<int>(rows), static_cast<int>(cols));
  };
  for (uint64_t l = 0; l < L; ++l) {
    auto& Lw = m.weights.layers[l];
    Lw.attn_norm = slice(rms_att, l, dim);
    auto qkv = slice(wq, l, dim * dim);
    auto k = slice(wk, l, kvd * dim);
    auto v = slice(wv, l, kvd * dim);
    qkv.insert(qkv.end(), k.begin(), k.end());
    qkv.insert(qkv.end(), v.begin(), v.end());
    Lw.wqkv = matrix(std::move(qkv), dim + 2 * kvd, dim);
    Lw.wo = matrix(slice(wo, l, dim * dim), dim, dim);
    Lw.ffn_norm = slice(rms_ffn, l, dim);
    auto w13 = slice(w1, l, hid * dim);
    auto up = slice(w3, l, hid * dim);
    w13.insert(w13.end(), up.begin(), up.end());
    Lw.w13 = matrix(std::move(w13), 2 * hid, dim);
    Lw.w2 = matrix(slice(w2, l, dim * hid), dim, hid);
  }
  RETURN_IF_ERROR(m.weights.tok_embd.CheckFinite(name, "token_embedding"));
  RETURN_IF_ERROR(CheckFinite(name, "rms_final", m.weights.output_norm));
  RETURN_IF_ERROR(m.weights.output.CheckFinite(name, "wcls"));
  for (uint64_t l = 0; l < L; ++l) {
    const auto& Lw = m.weights.layers[l];
    const std::string t = "layer " + std::to_string(l) + " ";
    RETURN_IF_ERROR(CheckFinite(name, t + "rms_att", Lw.attn_norm));
    RETURN_IF_ERROR(Lw.wqkv.CheckFinite(name, t + "wq/wk/wv"));
    RETURN_IF_ERROR(Lw.wo.CheckFinite(name, t + "wo"));
    RETURN_IF_ERROR(CheckFinite(name, t + "rms_ffn", Lw.ffn_norm));
    RETURN_IF_ERROR(Lw.w13.CheckFinite(name, t + "w1/w3"));
    RETURN_IF_ERROR(Lw.w2.CheckFinite(name, t + "w2"));
  }
  return m;
}

}  // namespace tierkv::model

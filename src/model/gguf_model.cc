// Llama-architecture models in GGUF, with the llama.cpp tensor and key names.
// RoPE: adjacent pairs (llama.cpp's "normal" mode for LLAMA), as llama2.c.
#include <cstdio>

#include "model/gguf.h"
#include "model/gguf_vocab.h"
#include "model/weights.h"
#include "tierkv/tokenizer.h"

namespace tierkv::model {
namespace {

Result<int> GetDim(const GgufFile& f, const std::string& name, const std::string& key) {
  ASSIGN_OR_RETURN(int64_t v, f.GetInt(key));
  if (v <= 0 || v > (1 << 24)) {
    return Status::InvalidArgument(name + ": metadata '" + key + "'=" + std::to_string(v) +
                                   " is out of range");
  }
  return static_cast<int>(v);
}

}  // namespace

Result<LoadedModel> ParseGgufModel(const std::string& name, const std::string& data) {
  ASSIGN_OR_RETURN(GgufFile f, GgufFile::Parse(name, data));
  LoadedModel m;
  m.format = "gguf";
  ASSIGN_OR_RETURN(std::string arch, f.GetString("general.architecture"));
  if (arch != "llama") {
    return Status::InvalidArgument(name + ": general.architecture '" + arch +
                                   "' is not supported (only llama)");
  }
  ModelConfig& c = m.config;
  ASSIGN_OR_RETURN(c.dim, GetDim(f, name, "llama.embedding_length"));
  ASSIGN_OR_RETURN(c.hidden_dim, GetDim(f, name, "llama.feed_forward_length"));
  ASSIGN_OR_RETURN(c.n_layers, GetDim(f, name, "llama.block_count"));
  ASSIGN_OR_RETURN(c.n_heads, GetDim(f, name, "llama.attention.head_count"));
  c.n_kv_heads = c.n_heads;
  if (f.Has("llama.attention.head_count_kv")) {
    ASSIGN_OR_RETURN(c.n_kv_heads, GetDim(f, name, "llama.attention.head_count_kv"));
  }
  ASSIGN_OR_RETURN(c.context_length, GetDim(f, name, "llama.context_length"));
  if (f.Has("llama.rope.freq_base")) {
    ASSIGN_OR_RETURN(double theta, f.GetFloat("llama.rope.freq_base"));
    c.rope_theta = static_cast<float>(theta);
  }
  if (f.Has("llama.attention.layer_norm_rms_epsilon")) {
    ASSIGN_OR_RETURN(double eps, f.GetFloat("llama.attention.layer_norm_rms_epsilon"));
    c.norm_eps = static_cast<float>(eps);
  }
  const GgufTensor* emb = f.FindTensor("token_embd.weight");
  if (emb == nullptr) return Status::InvalidArgument(name + ": tensor 'token_embd.weight' is missing");
  if (emb->dims.size() != 2) {
    return Status::InvalidArgument(name + ": tensor 'token_embd.weight' must be 2-dimensional");
  }
  c.vocab_size = static_cast<int>(emb->dims[1]);
  if (f.Has("llama.vocab_size")) {
    ASSIGN_OR_RETURN(int v, GetDim(f, name, "llama.vocab_size"));
    if (v != c.vocab_size) {
      return Status::InvalidArgument(name + ": llama.vocab_size=" + std::to_string(v) +
                                     " but token_embd.weight has " +
                                     std::to_string(c.vocab_size) + " rows");
    }
  }
  if (Status s = c.Validate(); !s.ok()) return s.WithContext(name);
  if (f.Has("llama.rope.dimension_count")) {
    ASSIGN_OR_RETURN(int rd, GetDim(f, name, "llama.rope.dimension_count"));
    if (rd != c.head_dim()) {
      return Status::InvalidArgument(name + ": llama.rope.dimension_count=" + std::to_string(rd) +
                                     " differs from the head size " +
                                     std::to_string(c.head_dim()) + " (partial RoPE unsupported)");
    }
  }

  const uint64_t dim = c.dim, kvd = c.kv_dim(), hid = c.hidden_dim, V = c.vocab_size;
  ASSIGN_OR_RETURN(m.weights.tok_embd, f.ReadTensor("token_embd.weight", {dim, V}));
  ASSIGN_OR_RETURN(m.weights.output_norm, f.ReadTensor("output_norm.weight", {dim}));
  if (f.FindTensor("output.weight") != nullptr) {
    ASSIGN_OR_RETURN(m.weights.output, f.ReadTensor("output.weight", {dim, V}));
  }
  // Tensors of blocks past block_count mean the count and the file disagree.
  for (const std::string& t : f.TensorNames()) {
    int block = -1;
    if (std::sscanf(t.c_str(), "blk.%d.", &block) == 1 && block >= c.n_layers) {
      return Status::Corruption(name + ": llama.block_count=" + std::to_string(c.n_layers) +
                                " but the file has tensor '" + t + "'");
    }
  }
  m.weights.layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    auto& L = m.weights.layers[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    ASSIGN_OR_RETURN(L.attn_norm, f.ReadTensor(p + "attn_norm.weight", {dim}));
    ASSIGN_OR_RETURN(L.wqkv, f.ReadTensor(p + "attn_q.weight", {dim, dim}));
    ASSIGN_OR_RETURN(auto wk, f.ReadTensor(p + "attn_k.weight", {dim, kvd}));
    ASSIGN_OR_RETURN(auto wv, f.ReadTensor(p + "attn_v.weight", {dim, kvd}));
    L.wqkv.insert(L.wqkv.end(), wk.begin(), wk.end());
    L.wqkv.insert(L.wqkv.end(), wv.begin(), wv.end());
    ASSIGN_OR_RETURN(L.wo, f.ReadTensor(p + "attn_output.weight", {dim, dim}));
    ASSIGN_OR_RETURN(L.ffn_norm, f.ReadTensor(p + "ffn_norm.weight", {dim}));
    ASSIGN_OR_RETURN(L.w13, f.ReadTensor(p + "ffn_gate.weight", {dim, hid}));
    ASSIGN_OR_RETURN(auto up, f.ReadTensor(p + "ffn_up.weight", {dim, hid}));
    L.w13.insert(L.w13.end(), up.begin(), up.end());
    ASSIGN_OR_RETURN(L.w2, f.ReadTensor(p + "ffn_down.weight", {hid, dim}));
    RETURN_IF_ERROR(CheckFinite(name, p + "*", L.wqkv));
    RETURN_IF_ERROR(CheckFinite(name, p + "*", L.w13));
    RETURN_IF_ERROR(CheckFinite(name, p + "*", L.w2));
    RETURN_IF_ERROR(CheckFinite(name, p + "*", L.wo));
    RETURN_IF_ERROR(CheckFinite(name, p + "*", L.attn_norm));
    RETURN_IF_ERROR(CheckFinite(name, p + "*", L.ffn_norm));
  }
  RETURN_IF_ERROR(CheckFinite(name, "token_embd.weight", m.weights.tok_embd));
  RETURN_IF_ERROR(CheckFinite(name, "output.weight", m.weights.output));
  RETURN_IF_ERROR(CheckFinite(name, "output_norm.weight", m.weights.output_norm));

  if (f.Has("tokenizer.ggml.tokens")) {
    ASSIGN_OR_RETURN(m.vocab, ReadGgufVocab(f, name));
  }
  return m;
}

}  // namespace tierkv::model

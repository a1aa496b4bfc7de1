// Random-weight Llama-family models written as GGUF for tests: by default
// GQA (4 heads, 2 KV heads, head size 16), 2 layers, F32 weights; any shape
// and matrix type can be asked for (the benchmarks' Llama-3.2-1B shape:
// tests/testing/random_gguf_main.cc). Optionally Q/K/V biases (Qwen2),
// Llama 3.1's rope_freqs, a tied output; the tokenizer of a vocabulary-only
// GGUF file, or none (a vocabulary of 512 ids). Weights are N(0, 1/cols)
// scaled so activations stay of order one at any width.
#pragma once

#include <cmath>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <random>
#include <string>
#include <vector>

#include "model/gguf.h"

namespace tierkv::testing {

struct RandomModelSpec {
  std::string arch = "llama";                 // llama, mistral or qwen2
  const model::GgufFile* vocab = nullptr;     // its tokenizer.* keys are copied
  std::string vocab_file;                     // else: a vocabulary-only GGUF file to read them from
  bool biases = false, rope_factors = false, tied = false;
  uint32_t seed = 1;
  std::string chat_template;  // replaces the vocabulary's tokenizer.chat_template if set
  uint64_t dim = 64, heads = 4, kv_heads = 2, hidden = 128, layers = 2, context = 2048;
  model::GgmlType matrix_type = model::GgmlType::kF32;  // norms stay F32
};

inline void WriteRandomModel(const std::string& path, RandomModelSpec s) {
  std::string vocab_bytes;  // the parsed file points into it
  std::optional<model::GgufFile> vocab;
  if (s.vocab == nullptr && !s.vocab_file.empty()) {
    std::ifstream in(s.vocab_file, std::ios::binary);
    vocab_bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    auto parsed = model::GgufFile::Parse(s.vocab_file, vocab_bytes);
    if (!parsed.ok()) throw std::runtime_error(parsed.status().ToString());
    vocab = std::move(*parsed);
    s.vocab = &*vocab;
  }
  const uint64_t dim = s.dim, heads = s.heads, kv = s.kv_heads, hd = dim / heads, hid = s.hidden, layers = s.layers;
  uint64_t V = 512;
  model::GgufWriter w;
  if (s.vocab != nullptr) {
    V = s.vocab->GetStrings("tokenizer.ggml.tokens")->size();
    for (const auto& [k, v] : s.vocab->metadata()) {
      if (k.rfind("tokenizer.", 0) == 0 && !(k == "tokenizer.chat_template" && !s.chat_template.empty())) {
        w.SetValue(k, v);
      }
    }
  }
  if (!s.chat_template.empty()) w.SetString("tokenizer.chat_template", s.chat_template);
  const std::string a = s.arch;
  w.SetString("general.architecture", a);
  w.SetU32(a + ".embedding_length", dim);
  w.SetU32(a + ".feed_forward_length", hid);
  w.SetU32(a + ".block_count", layers);
  w.SetU32(a + ".attention.head_count", heads);
  w.SetU32(a + ".attention.head_count_kv", kv);
  w.SetU32(a + ".context_length", static_cast<uint32_t>(s.context));
  w.SetU32(a + ".rope.dimension_count", hd);
  w.SetF32(a + ".rope.freq_base", a == "qwen2" ? 1000000.f : 500000.f);
  w.SetF32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  std::mt19937 rng(s.seed);
  auto rnd = [&](size_t n, float scale) {
    std::normal_distribution<float> d(0.f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
  };
  auto ones = [&](size_t n) {
    std::vector<float> v = rnd(n, 0.1f);
    for (float& x : v) x += 1.f;
    return v;
  };
  const auto F32 = model::GgmlType::kF32, Q = s.matrix_type;
  // The historical small models keep their scales (tests pin their outputs).
  const bool small = dim == 64;
  const float sd = small ? 0.2f : 1.f / std::sqrt(static_cast<float>(dim));
  const float sh = small ? 0.2f : 1.f / std::sqrt(static_cast<float>(hid));
  w.AddTensor("token_embd.weight", {dim, V}, Q, rnd(dim * V, 1.f));
  w.AddTensor("output_norm.weight", {dim}, F32, ones(dim));
  if (!s.tied) w.AddTensor("output.weight", {dim, V}, Q, rnd(dim * V, small ? 0.3f : sd));
  if (s.rope_factors) {
    std::vector<float> f(hd / 2);
    for (size_t i = 0; i < f.size(); ++i) f[i] = i < f.size() / 2 ? 1.f : 1.f + 3.f * static_cast<float>(i) / f.size();
    w.AddTensor("rope_freqs.weight", {hd / 2}, F32, f);
  }
  for (uint64_t l = 0; l < layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    w.AddTensor(p + "attn_norm.weight", {dim}, F32, ones(dim));
    w.AddTensor(p + "attn_q.weight", {dim, dim}, Q, rnd(dim * dim, sd));
    w.AddTensor(p + "attn_k.weight", {dim, kv * hd}, Q, rnd(dim * kv * hd, sd));
    w.AddTensor(p + "attn_v.weight", {dim, kv * hd}, Q, rnd(dim * kv * hd, sd));
    if (s.biases) {
      w.AddTensor(p + "attn_q.bias", {dim}, F32, rnd(dim, 0.5f));
      w.AddTensor(p + "attn_k.bias", {kv * hd}, F32, rnd(kv * hd, 0.5f));
      w.AddTensor(p + "attn_v.bias", {kv * hd}, F32, rnd(kv * hd, 0.5f));
    }
    w.AddTensor(p + "attn_output.weight", {dim, dim}, Q, rnd(dim * dim, sd));
    w.AddTensor(p + "ffn_norm.weight", {dim}, F32, ones(dim));
    w.AddTensor(p + "ffn_gate.weight", {dim, hid}, Q, rnd(dim * hid, sd));
    w.AddTensor(p + "ffn_up.weight", {dim, hid}, Q, rnd(dim * hid, sd));
    w.AddTensor(p + "ffn_down.weight", {hid, dim}, Q, rnd(hid * dim, sh));
  }
  std::ofstream(path, std::ios::binary) << w.Serialize();
}

}  // namespace tierkv::testing

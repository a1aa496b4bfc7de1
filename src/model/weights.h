// The in-memory weights of a Llama-family model, in fp32, with the projections
// that read the same input fused so that one matrix product does their work.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tierkv/model.h"

namespace tierkv::model {

struct LayerWeights {
  std::vector<float> attn_norm;  // [dim]
  std::vector<float> wqkv;       // [(dim + 2*kv_dim) × dim]: wq rows, then wk, then wv
  std::vector<float> bqkv;       // [dim + 2*kv_dim]: Q, K, V biases (Qwen2); empty: none
  std::vector<float> wo;         // [dim × dim]
  std::vector<float> ffn_norm;   // [dim]
  std::vector<float> w13;        // [2*hidden × dim]: w1 (gate) rows, then w3 (up)
  std::vector<float> w2;         // [dim × hidden]
};

struct ModelWeights {
  std::vector<float> tok_embd;     // [vocab × dim]
  std::vector<float> output_norm;  // [dim]
  std::vector<float> output;       // [vocab × dim]; empty when tied to tok_embd
  // [head_dim/2]: RoPE frequency divisors (Llama 3.1's rope scaling, GGUF
  // rope_freqs.weight); empty: none.
  std::vector<float> rope_freq_factors;
  std::vector<LayerWeights> layers;
};

struct LoadedModel {
  ModelConfig config;
  ModelWeights weights;
  std::optional<Vocab> vocab;
  std::string format;
};

// Parsers of the two file formats; `name` is used in error messages.
Result<LoadedModel> ParseLlama2c(const std::string& name, const std::string& data);
Result<LoadedModel> ParseGgufModel(const std::string& name, const std::string& data);

// Builds the Model from loaded weights (checks shapes).
Result<std::unique_ptr<Model>> MakeTransformer(LoadedModel loaded, uint64_t content_hash);

// Non-OK if any value is NaN or infinite; names the tensor.
Status CheckFinite(const std::string& name, const std::string& tensor, const std::vector<float>& v);

}  // namespace tierkv::model

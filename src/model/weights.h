// The in-memory weights of a Llama-family model, with the projections that
// read the same input fused so that one matrix product does their work.
// Matrices are fp32 or in the file's types, read from the model file's
// mapping or from the huge-page copy of their rows (model/weight_matrix.h);
// vectors are fp32.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/weight_matrix.h"
#include "tierkv/filesystem.h"
#include "tierkv/model.h"
#include "util/huge_pages.h"

namespace tierkv::model {

struct LayerWeights {
  std::vector<float> attn_norm;  // [dim]
  WeightMatrix wqkv;             // [(dim + 2*kv_dim) × dim]: wq rows, then wk, then wv
  std::vector<float> bqkv;       // [dim + 2*kv_dim]: Q, K, V biases (Qwen2); empty: none
  WeightMatrix wo;               // [dim × dim]
  std::vector<float> ffn_norm;   // [dim]
  WeightMatrix w13;              // [2*hidden × dim]: w1 (gate) rows, then w3 (up)
  WeightMatrix w2;               // [dim × hidden]
};

struct ModelWeights {
  WeightMatrix tok_embd;           // [vocab × dim]
  std::vector<float> output_norm;  // [dim]
  WeightMatrix output;             // [vocab × dim]; empty when tied to tok_embd
  // [head_dim/2]: RoPE frequency divisors (Llama 3.1's rope scaling, GGUF
  // rope_freqs.weight); empty: none.
  std::vector<float> rope_freq_factors;
  std::vector<LayerWeights> layers;
  // The file's bytes, kept with WeightStorage::kMapped (an untied embedding
  // table and packed parts' rows are read from it); null with kFp32.
  std::shared_ptr<const FileBytes> file;
  // The rows products read, copied out of the file's mapping into huge
  // pages (ParseGgufModel); null when nothing was copied.
  std::unique_ptr<HugePageBuffer> rows;

  // Every matrix with its GGUF tensor name(s), in file order; the output
  // only when it is not tied to the embedding.
  std::vector<std::pair<std::string, WeightMatrix*>> Matrices();
  std::vector<std::pair<std::string, const WeightMatrix*>> Matrices() const;
};

struct LoadedModel {
  ModelConfig config;
  ModelWeights weights;
  std::optional<Vocab> vocab;
  std::string format;
};

// Parsers of the two file formats; `name` is used in error messages.
// llama2.c weights are copied to owned fp32. A GGUF's matrices are read in
// place from `file` (kept alive by the weights) with WeightStorage::kMapped,
// converted to owned fp32 with kFp32 (then `file` is not kept).
Result<LoadedModel> ParseLlama2c(const std::string& name, std::string_view data);
Result<LoadedModel> ParseGgufModel(const std::string& name, std::shared_ptr<const FileBytes> file,
                                   WeightStorage storage);

// Builds the Model from loaded weights (checks shapes).
Result<std::unique_ptr<Model>> MakeTransformer(LoadedModel loaded, uint64_t content_hash);

// Non-OK if any value is NaN or infinite; names the tensor.
Status CheckFinite(const std::string& name, const std::string& tensor, const std::vector<float>& v);

}  // namespace tierkv::model

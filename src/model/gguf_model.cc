// Llama-family models in GGUF, with llama.cpp's tensor and key names:
// `llama` (Llama 2 and 3; Llama 3.1's rope_freqs), `mistral` (the same
// graph), `qwen2` (biases on Q, K and V; RoPE in halves, llama.cpp's neox
// mode). RoPE otherwise pairs adjacent dimensions (llama.cpp's "normal"
// mode for llama, as llama2.c).
#include <cmath>
#include <cstdio>

#include "model/gguf.h"
#include "model/gguf_vocab.h"
#include "model/quant_dot.h"
#include "model/weights.h"
#include "tierkv/logging.h"
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

// The architecture's hyperparameters (keys "<arch>.*").
Status ReadConfig(const GgufFile& f, const std::string& name, const std::string& arch, ModelConfig* c) {
  const std::string k = arch + ".";
  c->architecture = arch;
  c->rope_neox = arch == "qwen2";
  ASSIGN_OR_RETURN(c->dim, GetDim(f, name, k + "embedding_length"));
  ASSIGN_OR_RETURN(c->hidden_dim, GetDim(f, name, k + "feed_forward_length"));
  ASSIGN_OR_RETURN(c->n_layers, GetDim(f, name, k + "block_count"));
  ASSIGN_OR_RETURN(c->n_heads, GetDim(f, name, k + "attention.head_count"));
  c->n_kv_heads = c->n_heads;
  if (f.Has(k + "attention.head_count_kv")) {
    ASSIGN_OR_RETURN(c->n_kv_heads, GetDim(f, name, k + "attention.head_count_kv"));
  }
  ASSIGN_OR_RETURN(c->context_length, GetDim(f, name, k + "context_length"));
  if (f.Has(k + "rope.freq_base")) {
    ASSIGN_OR_RETURN(double theta, f.GetFloat(k + "rope.freq_base"));
    c->rope_theta = static_cast<float>(theta);
  }
  if (f.Has(k + "attention.layer_norm_rms_epsilon")) {
    ASSIGN_OR_RETURN(double eps, f.GetFloat(k + "attention.layer_norm_rms_epsilon"));
    c->norm_eps = static_cast<float>(eps);
  }
  const GgufTensor* emb = f.FindTensor("token_embd.weight");
  if (emb == nullptr) return Status::InvalidArgument(name + ": tensor 'token_embd.weight' is missing");
  if (emb->dims.size() != 2) {
    return Status::InvalidArgument(name + ": tensor 'token_embd.weight' must be 2-dimensional");
  }
  c->vocab_size = static_cast<int>(emb->dims[1]);
  if (f.Has(k + "vocab_size")) {
    ASSIGN_OR_RETURN(int v, GetDim(f, name, k + "vocab_size"));
    if (v != c->vocab_size) {
      return Status::InvalidArgument(name + ": " + k + "vocab_size=" + std::to_string(v) + " but token_embd.weight has " +
                                     std::to_string(c->vocab_size) + " rows");
    }
  }
  if (Status s = c->Validate(); !s.ok()) return s.WithContext(name);
  if (f.Has(k + "rope.dimension_count")) {
    ASSIGN_OR_RETURN(int rd, GetDim(f, name, k + "rope.dimension_count"));
    if (rd != c->head_dim()) {
      return Status::InvalidArgument(name + ": " + k + "rope.dimension_count=" + std::to_string(rd) +
                                     " differs from the head size " + std::to_string(c->head_dim()) +
                                     " (partial RoPE unsupported)");
    }
  }
  return Status::Ok();
}

// Appends a 2-dimensional tensor's rows (ne = [cols, rows]) to *m, in place.
Status AddRows(const GgufFile& f, const std::string& tensor, uint64_t cols, uint64_t rows, WeightMatrix* m) {
  ASSIGN_OR_RETURN(const GgufTensor* t, f.Tensor(tensor, {cols, rows}));
  Status s = m->AppendInPlace(t->type, f.TensorData(*t), static_cast<int>(rows), static_cast<int>(cols));
  return s.ok() ? s : s.WithContext("tensor '" + tensor + "'");
}

Status ReadLayer(const GgufFile& f, const std::string& name, const ModelConfig& c, int l, bool biases,
                 LayerWeights* L) {
  const uint64_t dim = c.dim, kvd = c.kv_dim(), hid = c.hidden_dim;
  const std::string p = "blk." + std::to_string(l) + ".";
  ASSIGN_OR_RETURN(L->attn_norm, f.ReadTensor(p + "attn_norm.weight", {dim}));
  RETURN_IF_ERROR(AddRows(f, p + "attn_q.weight", dim, dim, &L->wqkv));
  RETURN_IF_ERROR(AddRows(f, p + "attn_k.weight", dim, kvd, &L->wqkv));
  RETURN_IF_ERROR(AddRows(f, p + "attn_v.weight", dim, kvd, &L->wqkv));
  if (biases) {
    ASSIGN_OR_RETURN(L->bqkv, f.ReadTensor(p + "attn_q.bias", {dim}));
    ASSIGN_OR_RETURN(auto bk, f.ReadTensor(p + "attn_k.bias", {kvd}));
    ASSIGN_OR_RETURN(auto bv, f.ReadTensor(p + "attn_v.bias", {kvd}));
    L->bqkv.insert(L->bqkv.end(), bk.begin(), bk.end());
    L->bqkv.insert(L->bqkv.end(), bv.begin(), bv.end());
    RETURN_IF_ERROR(CheckFinite(name, p + "attn_*.bias", L->bqkv));
  }
  RETURN_IF_ERROR(AddRows(f, p + "attn_output.weight", dim, dim, &L->wo));
  ASSIGN_OR_RETURN(L->ffn_norm, f.ReadTensor(p + "ffn_norm.weight", {dim}));
  RETURN_IF_ERROR(AddRows(f, p + "ffn_gate.weight", dim, hid, &L->w13));
  RETURN_IF_ERROR(AddRows(f, p + "ffn_up.weight", dim, hid, &L->w13));
  RETURN_IF_ERROR(AddRows(f, p + "ffn_down.weight", hid, dim, &L->w2));
  RETURN_IF_ERROR(CheckFinite(name, p + "attn_norm.weight", L->attn_norm));
  return CheckFinite(name, p + "ffn_norm.weight", L->ffn_norm);
}

// The matrices' bytes in fp32.
uint64_t Fp32Bytes(const ModelWeights& w) {
  uint64_t b = 0;
  for (const auto& [tensor, m] : w.Matrices()) b += uint64_t{4} * static_cast<uint64_t>(m->rows()) * m->cols();
  return b;
}

// Whether every matrix products read is held in a quantized type with an
// in-type kernel (8-bit activations: Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K):
// then auto keeps the file's bytes, as llama.cpp does, at any size. An
// untied embedding table is only looked up and does not count.
bool AllQuantizedInType(const ModelWeights& w) {
  for (const auto& [tensor, m] : w.Matrices()) {
    if (m == &w.tok_embd && !w.output.empty()) continue;
    for (const WeightMatrix::PartInfo& p : m->parts()) {
      const ActFormat f = ActivationFormat(p.type);
      if (f == ActFormat::kNone || f == ActFormat::kF32) return false;
    }
  }
  return true;
}

// Tensors of blocks past block_count mean the count and the file disagree.
Status CheckBlocks(const GgufFile& f, const std::string& name, const std::string& arch, int n_layers) {
  for (const std::string& t : f.TensorNames()) {
    int block = -1;
    if (std::sscanf(t.c_str(), "blk.%d.", &block) == 1 && block >= n_layers) {
      return Status::Corruption(name + ": " + arch + ".block_count=" + std::to_string(n_layers) +
                                " but the file has tensor '" + t + "'");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<LoadedModel> ParseGgufModel(const std::string& name, std::shared_ptr<const FileBytes> file,
                                   WeightStorage storage) {
  ASSIGN_OR_RETURN(GgufFile f, GgufFile::Parse(name, file->data()));
  LoadedModel m;
  m.format = "gguf";
  ASSIGN_OR_RETURN(std::string arch, f.GetString("general.architecture"));
  if (Status s = ModelConfig::CheckArchitecture(arch); !s.ok()) return s.WithContext(name + ": general.architecture");
  ModelConfig& c = m.config;
  RETURN_IF_ERROR(ReadConfig(f, name, arch, &c));
  const uint64_t dim = c.dim, V = c.vocab_size;
  RETURN_IF_ERROR(AddRows(f, "token_embd.weight", dim, V, &m.weights.tok_embd));
  ASSIGN_OR_RETURN(m.weights.output_norm, f.ReadTensor("output_norm.weight", {dim}));
  if (f.FindTensor("output.weight") != nullptr) {
    RETURN_IF_ERROR(AddRows(f, "output.weight", dim, V, &m.weights.output));
  }
  if (f.FindTensor("rope_freqs.weight") != nullptr) {
    ASSIGN_OR_RETURN(m.weights.rope_freq_factors,
                     f.ReadTensor("rope_freqs.weight", {static_cast<uint64_t>(c.head_dim() / 2)}));
    for (float x : m.weights.rope_freq_factors) {
      if (!(x > 0) || !std::isfinite(x)) {
        return Status::InvalidArgument(name + ": tensor 'rope_freqs.weight' holds " + std::to_string(x) +
                                       " (frequency factors must be positive)");
      }
    }
  }
  RETURN_IF_ERROR(CheckBlocks(f, name, arch, c.n_layers));
  // Qwen2 has Q/K/V biases; a llama file may too (llama.cpp reads them when present).
  const bool biases = arch == "qwen2" || f.FindTensor("blk.0.attn_q.bias") != nullptr;
  m.weights.layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) RETURN_IF_ERROR(ReadLayer(f, name, c, l, biases, &m.weights.layers[l]));
  RETURN_IF_ERROR(CheckFinite(name, "output_norm.weight", m.weights.output_norm));
  if (f.Has("tokenizer.ggml.tokens")) {
    ASSIGN_OR_RETURN(m.vocab, ReadGgufVocab(f, name));
  }
  if (storage == WeightStorage::kAuto) {
    storage = Fp32Bytes(m.weights) <= kAutoFp32Bytes && !AllQuantizedInType(m.weights) ? WeightStorage::kFp32
                                                                                       : WeightStorage::kMapped;
  }
  // Converted first, so that fp32 weights are checked in place rather than
  // dequantized twice; mapped ones are dequantized tile by tile to check.
  for (auto& [tensor, matrix] : m.weights.Matrices()) {
    if (storage == WeightStorage::kFp32) *matrix = matrix->ToFloats();
    RETURN_IF_ERROR(matrix->CheckFinite(name, tensor));
  }
  if (storage == WeightStorage::kMapped) {
    m.weights.file = std::move(file);
    // The matrices products read (an untied embedding table is only looked
    // up row by row, and stays in the mapping): Q4_K and Q8_0 repacked for
    // the in-type products (model/quant_pack.h), the other rows moved out of
    // the mapping into huge pages, the file's pages of both released. The
    // copy is the process's own memory, no longer page cache shared with
    // other processes; resident memory stays about the file's size.
    const bool mapped = m.weights.file->mapped();
    std::vector<WeightMatrix*> products;
    for (auto& [tensor, matrix] : m.weights.Matrices()) {
      if (matrix != &m.weights.tok_embd || m.weights.output.empty()) products.push_back(matrix);
    }
    for (WeightMatrix* matrix : products) matrix->PackForProducts(/*release_rows=*/mapped);
    if (mapped) {
      auto rows = MoveRowsToHugePages(products, /*release_rows=*/true);
      if (rows.ok()) {
        m.weights.rows = std::move(*rows);
      } else {
        TIERKV_LOG(kWarn) << name << ": weights stay in the file's mapping (" << rows.status().ToString() << ")";
      }
    }
  }
  return m;
}

}  // namespace tierkv::model
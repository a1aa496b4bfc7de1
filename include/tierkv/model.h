// A Llama-family transformer on the CPU, with the KV hooks the cache layer uses.
//
// Prefill() runs a batch of new tokens at absolute positions
// [start_pos, start_pos + n). Before each layer's attention it calls
// `before_attention`, which may supply, per KV head, any set of prefix rows
// (K after RoPE and V, with positions < start_pos) in any order, in fp32 or
// fp16. The new tokens attend to exactly those rows plus themselves (causal).
// It can return the new tokens' K and V per layer and, per layer and query
// head, the attention column sums over the supplied rows (H2O importance).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tierkv/filesystem.h"
#include "tierkv/kv.h"
#include "tierkv/status.h"

namespace tierkv {

struct ModelConfig {
  std::string architecture = "llama";
  int dim = 0;
  int hidden_dim = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int vocab_size = 0;
  int context_length = 0;
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  // RoPE's pairs: adjacent dimensions (2i, 2i+1: llama.cpp's "normal" mode,
  // llama's) or halves (i, i + head_dim/2: "neox", Qwen2's).
  bool rope_neox = false;

  int head_dim() const { return n_heads > 0 ? dim / n_heads : 0; }
  int kv_dim() const { return head_dim() * n_kv_heads; }
  int group() const { return n_kv_heads > 0 ? n_heads / n_kv_heads : 0; }
  // InvalidArgument naming the first bad field.
  Status Validate() const;
  // InvalidArgument unless `arch` is one the forward pass runs (llama,
  // mistral, qwen2), naming it.
  static Status CheckArchitecture(const std::string& arch);
  std::string ToString() const;
};

// A vocabulary as GGUF and llama2.c store it: SentencePiece-style (pieces
// with U+2581 for a space, merged by score) or byte-level BPE (GPT-2's byte
// alphabet, merged by rank; tokenizer.ggml.model "gpt2", as Llama 3 and
// Qwen2 ship it).
struct Vocab {
  enum class Kind { kSentencePiece, kByteBpe };
  Kind kind = Kind::kSentencePiece;
  std::vector<std::string> pieces;
  std::vector<float> scores;   // SentencePiece; empty for byte BPE
  std::vector<int32_t> types;  // piece types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  int32_t unk_id = 0;  // -1: none (byte BPE)
  // Whether a sequence starts with BOS (tokenizer.ggml.add_bos_token; Qwen2
  // says no).
  bool add_bos = true;
  // SentencePiece's normalizer option: drop leading and trailing spaces and
  // collapse runs of spaces. On by default in SentencePiece (and in the
  // stories260K tokenizer); GGUF key tokenizer.ggml.remove_extra_whitespaces.
  bool remove_extra_whitespaces = true;
  // Byte BPE: the merges, "left right" in rank order (tokenizer.ggml.merges),
  // and the pre-tokenizer that splits text into words first
  // (tokenizer.ggml.pre: "llama-bpe", "qwen2", "gpt2", ...).
  std::vector<std::string> merges;
  std::string pre;
  // tokenizer.chat_template: the Jinja source of how the model's
  // conversations are written ("" if the file has none); tierkv/chat.h
  // recognises the common families.
  std::string chat_template;
};

// What the engine shows the hook before layer `layer`'s attention.
struct LayerView {
  int layer = 0;
  int n_new = 0;
  int start_pos = 0;
  // Row i of the new tokens: q + i*q_stride (n_heads × head_dim, after RoPE);
  // k + i*kv_stride and v + i*kv_stride (n_kv_heads × head_dim).
  const float* q = nullptr;
  size_t q_stride = 0;
  const float* k = nullptr;
  const float* v = nullptr;
  size_t kv_stride = 0;
  // Row i of the residual stream at the layer's input (before its attention
  // norm): x + i*x_stride (dim floats). Null where the caller has none.
  const float* x = nullptr;
  size_t x_stride = 0;
};

// Prefix rows for one layer: either empty (no prefix) or one KvRows per KV head.
struct LayerPrefix {
  std::vector<KvRows> heads;
};

// Fills `prefix` for the layer; the rows it points to must stay valid until
// the hook is called for the next layer (or Prefill returns). A non-OK status
// aborts the prefill and is returned from it.
using BeforeAttentionFn = std::function<Status(const LayerView& view, LayerPrefix* prefix)>;

enum class LogitsMode { kNone, kLast, kAll };

struct PrefillOptions {
  int start_pos = 0;
  BeforeAttentionFn before_attention;  // empty: no prefix rows
  bool capture_kv = false;
  KvDType kv_dtype = KvDType::kF32;
  bool column_sums = false;
  // Measure each layer's attention sparsity (PrefillResult::sparsity).
  bool attention_sparsity = false;
  LogitsMode logits = LogitsMode::kLast;
};

struct PrefillResult {
  int n_tokens = 0;
  // kLast: vocab_size floats; kAll: n_tokens × vocab_size.
  std::vector<float> logits;
  // capture_kv: per layer, K and V of the new tokens, n_tokens × kv_dim
  // elements of kv_dtype each (KV head h at offset h*head_dim); keys after RoPE.
  struct LayerKv {
    std::vector<uint8_t> k, v;
  };
  std::vector<LayerKv> kv;
  KvDType kv_dtype = KvDType::kF32;
  // column_sums[layer][q_head][j]: importance of the j-th supplied row of
  // that head's KV head, in the order the rows were supplied.
  std::vector<std::vector<std::vector<float>>> column_sums;
  // attention_sparsity: per layer, the share of the causal attention weights
  // (all heads, all new rows, over supplied and new rows) below 1% of their
  // row's maximum (CaR's profile).
  std::vector<double> sparsity;
};

// One sequence's new tokens in a batched forward pass (Model::PrefillBatch).
struct BatchItem {
  std::span<const int32_t> tokens;
  PrefillOptions options;
};

// What a model file holds, read without building the model: its format,
// size, and (GGUF) each tensor's name, type and shape.
struct ModelFileInfo {
  struct Tensor {
    std::string name, type;  // type as llama.cpp names it: "Q4_K"
    std::vector<uint64_t> dims;
    uint64_t bytes = 0;
  };
  std::string format;  // "gguf" or "llama2c" (all F32)
  uint64_t file_bytes = 0;
  std::vector<Tensor> tensors;  // GGUF only, by name
};
Result<ModelFileInfo> DescribeModelFile(const std::string& path, FileSystem* fs = FileSystem::Default());

// How a model's weight matrices are held in memory.
//  kFp32:   dequantized to fp32 at load (4 bytes per weight whatever the
//           file's type); products go straight to sgemm.
//  kMapped: in the file's own types, from its memory mapping (resident
//           about the file's size). Where the kernel has transparent huge
//           pages, the rows that products read are copied at load into one
//           buffer of them (decode reads every weight per token, faster
//           from 2 MiB pages than from the page cache's 4 KiB ones); an
//           untied embedding table stays in the mapping. Short products run
//           in type, long ones dequantize a tile of rows at a time for
//           sgemm, except packed rows on AVX-512 VNNI CPUs, which multiply
//           in type at every length (docs/models.md).
//  kAuto:   kMapped when every matrix products read is in a quantized
//           type with an in-type kernel (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K,
//           Q6_K: a quantized model runs on its own bytes, as llama.cpp
//           runs it), or when the matrices in fp32 would take more than
//           kAutoFp32Bytes; else kFp32 (measurements: docs/models.md).
//  llama2.c checkpoints are always fp32.
enum class WeightStorage { kAuto, kFp32, kMapped };
inline constexpr uint64_t kAutoFp32Bytes = uint64_t{1} << 30;
const char* WeightStorageName(WeightStorage s);
Result<WeightStorage> ParseWeightStorage(std::string_view name);

struct ModelLoadOptions {
  WeightStorage weights = WeightStorage::kAuto;
};

// Products of up to N activation rows (decode, short batches) multiply the
// weights in their own type against 8-bit activations; longer ones
// dequantize for sgemm. N per weight type is built in per kind of CPU
// (docs/engine.md). A crossover file measured on this machine (`tierkv
// bench-engine --calibrate FILE`) replaces those figures for the
// whole process, every model included: call it before models run. Fails,
// changing nothing, on a file that is unreadable, malformed (the message
// names the line and the field) or measured on another CPU or with other
// kernels.
Status UseCrossoverFile(const std::string& path);

class Model {
 public:
  virtual ~Model() = default;

  // Loads a GGUF file (llama, mistral or qwen2; tensors of any type
  // model/quant.h reads, held as options.weights says) or a llama2.c
  // checkpoint (legacy format, fp32), detected by content. Every header
  // field is validated and every weight checked finite; errors name the
  // file and the field or tensor.
  static Result<std::unique_ptr<Model>> Load(const std::string& path,
                                             FileSystem* fs = FileSystem::Default());
  static Result<std::unique_ptr<Model>> Load(const std::string& path, const ModelLoadOptions& options,
                                             FileSystem* fs = FileSystem::Default());
  // A model with random weights of the given shape (benchmarks and tests).
  static Result<std::unique_ptr<Model>> Random(const ModelConfig& config, uint64_t seed);

  virtual const ModelConfig& config() const = 0;
  // "gguf", "llama2c" or "random".
  virtual const std::string& format() const = 0;
  // How the weight matrices are held (kFp32 or kMapped, never kAuto) and
  // their bytes as held.
  virtual WeightStorage weight_storage() const = 0;
  virtual size_t weight_bytes() const = 0;
  // xxh3-64 of the model file's bytes (of the weights for Random()).
  virtual uint64_t content_hash() const = 0;
  // The tokenizer vocabulary stored in the model file, if any (GGUF).
  virtual const std::optional<Vocab>& embedded_vocab() const = 0;

  // Runs the new tokens. Thread-safe: concurrent calls share only the weights.
  // Errors: InvalidArgument for a token out of range, start_pos + n beyond the
  // context, or malformed prefix rows; whatever the hook returns.
  virtual Result<PrefillResult> Prefill(std::span<const int32_t> tokens,
                                        const PrefillOptions& options) const = 0;
  // Runs several sequences' new tokens in one pass (continuous batching's
  // decode step): every projection is one matrix product over all their
  // rows, each sequence attends its own prefix rows (its hook) and its own
  // new rows. Results in order, as Prefill gives each to rounding. Any
  // item's error fails the batch (nothing is returned).
  virtual Result<std::vector<PrefillResult>> PrefillBatch(std::span<const BatchItem> items) const = 0;

  // Layer `layer`'s queries and keys of its first `kv_heads` KV heads (and
  // their query groups) for n residual-stream rows x (x_stride floats
  // apart) at positions start_pos.., as the layer would compute them from
  // that input: its attention norm, projection, biases and RoPE. q gets n ×
  // (kv_heads × group × head_dim) floats, k n × (kv_heads × head_dim). What
  // a prediction of a later layer's attention needs (spec's query
  // predictor: layer l's input stands in for layer l+1's). On the calling
  // thread. InvalidArgument for a layer, head count or position out of range.
  virtual Status ProjectQk(int layer, const float* x, size_t x_stride, int n, int start_pos,
                           int kv_heads, std::vector<float>* q, std::vector<float>* k) const = 0;
};

}  // namespace tierkv

// Tokenizers: SentencePiece models (through libsentencepiece), llama2.c
// tokenizer.bin files, and the vocabulary embedded in a GGUF model. llama2.c
// files and GGUF "llama" vocabularies share one score-driven BPE (merge the
// best-scoring adjacent pair until none is in the vocabulary), which is how
// SentencePiece's BPE encodes; GGUF "gpt2" vocabularies (Llama 3, Qwen2) are
// byte-level BPE with a pre-tokenizer (model/bpe_tokenizer.h).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

#include "tierkv/filesystem.h"
#include "tierkv/model.h"
#include "tierkv/status.h"

namespace tierkv {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual int vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  // Token ids of `text`, with BOS first if add_bos and the vocabulary starts
  // sequences with BOS (Qwen2's does not). Special tokens' text is not
  // parsed as those tokens (user-defined tokens are). Thread-safe.
  virtual Result<std::vector<int32_t>> Encode(std::string_view text, bool add_bos) const = 0;
  // The text of `id` when it follows `prev`: byte tokens become their byte,
  // control tokens nothing, and the space SentencePiece puts before the first
  // word is dropped after BOS.
  virtual std::string DecodePiece(int32_t prev, int32_t id) const = 0;
  std::string Decode(std::span<const int32_t> ids) const;

  // As Encode(text, false), except that the text of a control token (BOS,
  // EOS, "<|im_start|>", "[INST]", ...) becomes that token, the longest
  // first, as llama.cpp's parse_special: for the text a chat template
  // writes, never for what a user sends. Thread-safe.
  Result<std::vector<int32_t>> EncodeSpecial(std::string_view text) const;
  // The vocabulary's control tokens (and BOS/EOS) by their text, longest first.
  virtual std::span<const std::pair<std::string, int32_t>> ControlTokens() const = 0;
  // The text of control token `id` ("" if it is not one).
  std::string ControlText(int32_t id) const;
};

// A run of plain text (token -1, a view into the text partitioned) or a token.
struct TextOrToken {
  std::string_view text;
  int32_t token = -1;
};
// `text` cut where the tokens' texts are, as llama.cpp partitions: each
// token in turn (`tokens` longest first) is cut out of the plain runs left.
std::vector<TextOrToken> PartitionAtTokens(std::string_view text,
                                           std::span<const std::pair<std::string, int32_t>> tokens);
// PartitionAtTokens at the tokenizer's control tokens.
std::vector<TextOrToken> SplitAtControlTokens(const Tokenizer& tok, std::string_view text);

// Token texts and ids, longest text first (stable), as PartitionAtTokens wants them.
void SortLongestFirst(std::vector<std::pair<std::string, int32_t>>* tokens);
// The control tokens of a vocabulary (piece type 3, BOS, EOS), longest text first.
std::vector<std::pair<std::string, int32_t>> VocabControlTokens(const Vocab& v);

Result<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& path);
// llama2.c tokenizer.bin; it does not record its size, so the model's vocab
// size is needed, and the file must hold exactly that many entries.
Result<std::unique_ptr<Tokenizer>> LoadLlama2cTokenizer(const std::string& path, int vocab_size,
                                                        FileSystem* fs = FileSystem::Default());
// SentencePiece-style score BPE or byte-level BPE, by vocab.kind.
Result<std::unique_ptr<Tokenizer>> NewVocabTokenizer(Vocab vocab);
// The tokenizer in a GGUF file's metadata; the file may hold no tensors (a
// vocabulary-only file, as llama.cpp's tokenizer tests use).
Result<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::string& path,
                                                     FileSystem* fs = FileSystem::Default());
// The vocabulary (and chat template) in a GGUF file's metadata.
Result<Vocab> LoadGgufVocab(const std::string& path, FileSystem* fs = FileSystem::Default());
// Reads a llama2.c tokenizer.bin into a Vocab (pieces with U+2581 for spaces).
Result<Vocab> ReadLlama2cVocab(const std::string& path, int vocab_size,
                               FileSystem* fs = FileSystem::Default());

// The tokenizer for `model`: from `path` if given (".model" = SentencePiece,
// ".gguf" = a GGUF file's tokenizer, else llama2.c tokenizer.bin), else the
// model's embedded vocabulary. Fails
// with InvalidArgument if the vocabulary size differs from the model's.
Result<std::unique_ptr<Tokenizer>> LoadTokenizerFor(const Model& model, const std::string& path);

}  // namespace tierkv

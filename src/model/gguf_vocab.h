// The tokenizer a GGUF file carries in its metadata (tokenizer.ggml.*):
// validated into a Vocab, every error naming the file and the key.
#pragma once

#include <string>

#include "model/gguf.h"
#include "tierkv/model.h"
#include "tierkv/status.h"

namespace tierkv::model {

// tokenizer.ggml.model "llama" (SentencePiece-style) or "gpt2" (byte-level
// BPE with tokenizer.ggml.merges and tokenizer.ggml.pre); anything else is
// InvalidArgument naming the model. NotFound when the file has no
// tokenizer.ggml.tokens.
Result<Vocab> ReadGgufVocab(const GgufFile& f, const std::string& name);

}  // namespace tierkv::model

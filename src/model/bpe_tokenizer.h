// Byte-level BPE (GPT-2's scheme, as Llama 3 and Qwen2 ship it in GGUF):
// text is split into words by the vocabulary's pre-tokenizer (a regular
// expression over Unicode classes, run by PCRE2), each word's bytes are
// mapped to GPT-2's printable byte alphabet, and adjacent symbols merge in
// the order of tokenizer.ggml.merges (lowest rank first, leftmost among
// equals). User-defined tokens (type 4) are split out of the text first,
// whole; control tokens are never produced from text. This is what
// llama.cpp's tokenizer does with parse_special off, and the reference
// test checks it id for id against llama.cpp's own test cases.
#pragma once

#include <memory>

#include "tierkv/model.h"
#include "tierkv/tokenizer.h"

namespace tierkv::model {

// InvalidArgument when the pre-tokenizer is not one this build knows
// (naming tokenizer.ggml.pre and those it knows) or a special id is outside
// the vocabulary.
Result<std::unique_ptr<Tokenizer>> NewByteBpeTokenizer(Vocab vocab);

}  // namespace tierkv::model

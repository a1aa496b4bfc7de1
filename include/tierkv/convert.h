// Conversion of a llama2.c checkpoint (plus its tokenizer) to GGUF, so that
// one self-contained file carries weights, config and vocabulary.
#pragma once

#include <string>

#include "tierkv/filesystem.h"
#include "tierkv/status.h"

namespace tierkv {

struct ConvertOptions {
  std::string input;      // llama2.c checkpoint
  std::string tokenizer;  // SentencePiece .model or llama2.c tokenizer.bin; empty: none embedded
  std::string output;     // GGUF file to write (atomically)
  bool f16 = true;        // F16 tensors (norms stay F32), else all F32
  std::string name;       // general.name
};

Status ConvertLlama2cToGguf(const ConvertOptions& options, FileSystem* fs = FileSystem::Default());

}  // namespace tierkv

// Conversion of a llama2.c checkpoint (plus its tokenizer) to GGUF, so that
// one self-contained file carries weights, config and vocabulary; and of a
// GGUF model to another tensor type.
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

// Rewrites the GGUF model `input` as `output` (atomically) with every weight
// matrix in `type` (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K; case-insensitive) and the vectors in F32; metadata
// (tokenizer included) copied. Round-to-nearest blocks, not llama-quantize's
// search: for test files and trying a type, not for the best quality.
Status QuantizeGguf(const std::string& input, const std::string& output, const std::string& type,
                    FileSystem* fs = FileSystem::Default());

}  // namespace tierkv

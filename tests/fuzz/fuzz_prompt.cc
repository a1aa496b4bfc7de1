// libFuzzer target: the prompt-file line parser (JSON, fields, tokenization
// with the default model's tokenizer) on arbitrary lines.
#include <cstddef>
#include <cstdint>
#include <string>

#include "default_model.h"
#include "prompt_file.h"

namespace {
tierkv::fuzz::DefaultModel loaded;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  loaded = tierkv::fuzz::LoadDefaultModel();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  tierkv::app::ParsePromptLine(line, "fuzz.jsonl line 1", *loaded.tokenizer).status().IgnoreError();
  return 0;
}

// libFuzzer target: the prompt-file line parser (JSON, fields, tokenization
// with the default model's tokenizer) on arbitrary lines.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "prompt_file.h"
#include "tierkv/model.h"
#include "tierkv/tokenizer.h"

namespace {
std::unique_ptr<tierkv::Model> model;
std::unique_ptr<tierkv::Tokenizer> tokenizer;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto m = tierkv::Model::Load(TIERKV_DEFAULT_MODEL);
  if (!m.ok()) __builtin_trap();
  model = std::move(m).value();
  auto t = tierkv::LoadTokenizerFor(*model, "");
  if (!t.ok()) __builtin_trap();
  tokenizer = std::move(t).value();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  tierkv::app::ParsePromptLine(line, "fuzz.jsonl line 1", *tokenizer).status().IgnoreError();
  return 0;
}

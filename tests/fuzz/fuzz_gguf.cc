// libFuzzer target: the GGUF parser and tensor reader on arbitrary bytes.
// Any input must give a Status, never a crash, a hang or a read out of bounds.
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto f = tierkv::model::GgufFile::Parse("fuzz.gguf", bytes);
  if (!f.ok()) return 0;
  for (const std::string& name : f->TensorNames()) {
    const tierkv::model::GgufTensor* t = f->FindTensor(name);
    if (t && t->n_elements() <= (1u << 22)) f->ReadTensor(name, t->dims).status().IgnoreError();
  }
  f->GetString("general.architecture").status().IgnoreError();
  f->GetStrings("tokenizer.ggml.tokens").status().IgnoreError();
  return 0;
}

// libFuzzer target: the GGUF parser, tensor reader (every tensor type) and
// tokenizer metadata (SentencePiece-style and byte BPE) on arbitrary bytes.
// Any input must give a Status, never a crash, a hang or a read out of bounds.
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/gguf.h"
#include "model/gguf_vocab.h"
#include "tierkv/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto f = tierkv::model::GgufFile::Parse("fuzz.gguf", bytes);
  if (!f.ok()) return 0;
  for (const std::string& name : f->TensorNames()) {
    const tierkv::model::GgufTensor* t = f->FindTensor(name);
    if (t && t->n_elements() <= (1u << 22)) f->ReadTensor(name, t->dims).status().IgnoreError();
  }
  f->GetString("general.architecture").status().IgnoreError();
  // The tokenizer metadata: a vocabulary that validates must tokenize.
  auto vocab = tierkv::model::ReadGgufVocab(*f, "fuzz.gguf");
  if (!vocab.ok() || vocab->pieces.size() > (1u << 16)) return 0;
  auto tok = tierkv::NewVocabTokenizer(std::move(*vocab));
  if (tok.ok()) {
    for (const char* text : {"Hello world", " a  b\n\tc 123 \xff", "<s>[PAD1]don't"}) {
      auto ids = (*tok)->Encode(text, true);
      if (ids.ok()) (*tok)->Decode(*ids);
    }
  }
  return 0;
}

// libFuzzer target: the GGUF parser, tensor reader (every tensor type),
// tokenizer metadata (SentencePiece-style and byte BPE) and the model loader
// with its weights held both ways (fp32, read in place) on arbitrary bytes.
// Any input must give a Status, never a crash, a hang or a read out of bounds;
// a small model that loads must run a prefill.
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/gguf.h"
#include "model/gguf_vocab.h"
#include "tierkv/filesystem.h"
#include "tierkv/model.h"
#include "tierkv/tokenizer.h"

namespace {

void LoadAndRun(const std::string& bytes) {
  static const std::unique_ptr<tierkv::FileSystem> fs = [] {
    auto m = tierkv::NewMemFileSystem();
    m->CreateDir("/f").IgnoreError();
    return m;
  }();
  if (!tierkv::WriteFileAtomically(fs.get(), "/f/m.gguf", bytes).ok()) return;
  for (auto w : {tierkv::WeightStorage::kFp32, tierkv::WeightStorage::kMapped}) {
    tierkv::ModelLoadOptions o;
    o.weights = w;
    auto m = tierkv::Model::Load("/f/m.gguf", o, fs.get());
    if (!m.ok()) continue;
    const tierkv::ModelConfig& c = (*m)->config();
    if (int64_t{c.dim} * c.hidden_dim * c.n_layers > (1 << 20) || c.context_length < 2) continue;
    const int32_t tokens[2] = {0, 1 % c.vocab_size};
    (*m)->Prefill(tokens, tierkv::PrefillOptions{}).status().IgnoreError();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto f = tierkv::model::GgufFile::Parse("fuzz.gguf", bytes);
  if (!f.ok()) return 0;
  for (const std::string& name : f->TensorNames()) {
    const tierkv::model::GgufTensor* t = f->FindTensor(name);
    if (t && t->n_elements() <= (1u << 22)) f->ReadTensor(name, t->dims).status().IgnoreError();
  }
  f->GetString("general.architecture").status().IgnoreError();
  LoadAndRun(bytes);
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

// ReadGgufVocab (model/gguf_vocab.h), with llama.cpp's defaults for keys a
// file leaves out.
#include "model/gguf_vocab.h"

namespace tierkv::model {
namespace {

std::string Count(size_t n, size_t of) {
  return std::to_string(n) + " entries for " + std::to_string(of) + " tokens";
}

// An optional token id key: absent leaves *out; present must be a token.
Status ReadId(const GgufFile& f, const std::string& name, const std::string& key, size_t n, int32_t* out) {
  if (!f.Has(key)) return Status::Ok();
  ASSIGN_OR_RETURN(int64_t x, f.GetInt(key));
  if (x < 0 || x >= static_cast<int64_t>(n)) {
    return Status::InvalidArgument(name + ": " + key + "=" + std::to_string(x) + " is outside the vocabulary of " +
                                   std::to_string(n) + " tokens");
  }
  *out = static_cast<int32_t>(x);
  return Status::Ok();
}

Status ReadFlag(const GgufFile& f, const std::string& key, bool* out) {
  if (!f.Has(key)) return Status::Ok();
  ASSIGN_OR_RETURN(int64_t v, f.GetInt(key));
  *out = v != 0;
  return Status::Ok();
}

Status ReadTypes(const GgufFile& f, const std::string& name, Vocab* v) {
  if (!f.Has("tokenizer.ggml.token_type")) return Status::Ok();
  ASSIGN_OR_RETURN(auto types, f.GetNumbers("tokenizer.ggml.token_type"));
  if (types.size() != v->pieces.size()) {
    return Status::InvalidArgument(name + ": tokenizer.ggml.token_type has " + Count(types.size(), v->pieces.size()));
  }
  v->types.reserve(types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] < 0 || types[i] > 6) {
      return Status::InvalidArgument(name + ": tokenizer.ggml.token_type[" + std::to_string(i) + "]=" +
                                     std::to_string(types[i]) + " is not a token type (0-6)");
    }
    v->types.push_back(static_cast<int32_t>(types[i]));
  }
  return Status::Ok();
}

Status ReadMerges(const GgufFile& f, const std::string& name, Vocab* v) {
  if (!f.Has("tokenizer.ggml.merges")) {
    return Status::InvalidArgument(name + ": tokenizer.ggml.model 'gpt2' needs tokenizer.ggml.merges");
  }
  ASSIGN_OR_RETURN(v->merges, f.GetStrings("tokenizer.ggml.merges"));
  for (size_t i = 0; i < v->merges.size(); ++i) {
    const std::string& m = v->merges[i];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos || sp + 1 >= m.size()) {
      return Status::InvalidArgument(name + ": tokenizer.ggml.merges[" + std::to_string(i) + "] '" + m +
                                     "' is not two pieces separated by a space");
    }
  }
  if (f.Has("tokenizer.ggml.pre")) {
    ASSIGN_OR_RETURN(v->pre, f.GetString("tokenizer.ggml.pre"));
  }
  return Status::Ok();
}

}  // namespace

Result<Vocab> ReadGgufVocab(const GgufFile& f, const std::string& name) {
  if (!f.Has("tokenizer.ggml.tokens")) return Status::NotFound(name + ": no tokenizer.ggml.tokens");
  ASSIGN_OR_RETURN(std::string tm, f.GetString("tokenizer.ggml.model"));
  Vocab v;
  if (tm == "gpt2") {
    v.kind = Vocab::Kind::kByteBpe;
  } else if (tm != "llama") {
    return Status::InvalidArgument(name + ": tokenizer.ggml.model '" + tm +
                                   "' is not supported (llama: SentencePiece-style; gpt2: byte-level BPE)");
  }
  ASSIGN_OR_RETURN(v.pieces, f.GetStrings("tokenizer.ggml.tokens"));
  const size_t n = v.pieces.size();
  if (n == 0) return Status::InvalidArgument(name + ": tokenizer.ggml.tokens is empty");
  if (v.kind == Vocab::Kind::kSentencePiece) {
    ASSIGN_OR_RETURN(auto scores, f.GetNumbers("tokenizer.ggml.scores"));
    if (scores.size() != n) {
      return Status::InvalidArgument(name + ": tokenizer.ggml.scores has " + Count(scores.size(), n));
    }
    v.scores.assign(scores.begin(), scores.end());
  } else {
    RETURN_IF_ERROR(ReadMerges(f, name, &v));
    // llama.cpp's defaults for byte BPE: no unknown token, and BOS only
    // for Llama 3's pre-tokenizer unless the file says otherwise.
    v.unk_id = -1;
    v.bos_id = v.eos_id = -1;
    v.add_bos = v.pre == "llama-bpe" || v.pre == "llama3" || v.pre == "llama-v3";
  }
  RETURN_IF_ERROR(ReadTypes(f, name, &v));
  // llama.cpp's default when the key is absent is not to collapse spaces.
  v.remove_extra_whitespaces = false;
  RETURN_IF_ERROR(ReadFlag(f, "tokenizer.ggml.remove_extra_whitespaces", &v.remove_extra_whitespaces));
  RETURN_IF_ERROR(ReadFlag(f, "tokenizer.ggml.add_bos_token", &v.add_bos));
  RETURN_IF_ERROR(ReadId(f, name, "tokenizer.ggml.bos_token_id", n, &v.bos_id));
  RETURN_IF_ERROR(ReadId(f, name, "tokenizer.ggml.eos_token_id", n, &v.eos_id));
  RETURN_IF_ERROR(ReadId(f, name, "tokenizer.ggml.unknown_token_id", n, &v.unk_id));
  if (v.add_bos && v.bos_id < 0) {
    return Status::InvalidArgument(name + ": tokenizer.ggml.add_bos_token is set but tokenizer.ggml.bos_token_id is not");
  }
  if (f.Has("tokenizer.chat_template")) {
    ASSIGN_OR_RETURN(v.chat_template, f.GetString("tokenizer.chat_template"));
  }
  return v;
}

}  // namespace tierkv::model

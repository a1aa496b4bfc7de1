#include "tierkv/convert.h"

#include <sentencepiece_processor.h>

#include <filesystem>

#include "model/gguf.h"
#include "model/weights.h"
#include "tierkv/tokenizer.h"

namespace tierkv {
namespace {

Result<Vocab> VocabFromSentencePiece(const std::string& path) {
  sentencepiece::SentencePieceProcessor sp;
  auto st = sp.Load(path);
  if (!st.ok()) return Status::InvalidArgument("cannot load " + path + ": " + st.ToString());
  Vocab v;
  v.bos_id = sp.bos_id();
  v.eos_id = sp.eos_id();
  v.unk_id = sp.unk_id();
  // The normalizer spec is not in the public header; observe it instead.
  v.remove_extra_whitespaces = sp.EncodeAsIds("a  b") == sp.EncodeAsIds("a b");
  for (int i = 0; i < sp.GetPieceSize(); ++i) {
    v.pieces.push_back(sp.IdToPiece(i));
    v.scores.push_back(sp.GetScore(i));
    int32_t type = 1;
    if (sp.IsUnknown(i)) type = 2;
    else if (sp.IsControl(i)) type = 3;
    else if (sp.IsUnused(i)) type = 5;
    else if (sp.IsByte(i)) type = 6;
    v.types.push_back(type);
  }
  return v;
}

std::vector<float> Rows(const std::vector<float>& v, size_t first, size_t count, size_t width) {
  return std::vector<float>(v.begin() + first * width, v.begin() + (first + count) * width);
}

// The output must not be the input (it would be replaced) nor a directory.
Status CheckOutput(const ConvertOptions& o) {
  std::error_code ec;
  if (std::filesystem::is_directory(o.output, ec)) {
    return Status::InvalidArgument("output " + o.output + " is a directory; name the GGUF file to write");
  }
  if (std::filesystem::exists(o.output, ec) && std::filesystem::equivalent(o.input, o.output, ec)) {
    return Status::InvalidArgument("output " + o.output + " is the input file; name another file");
  }
  return Status::Ok();
}

}  // namespace

Status ConvertLlama2cToGguf(const ConvertOptions& o, FileSystem* fs) {
  RETURN_IF_ERROR(CheckOutput(o));
  auto data = ReadFileToString(fs, o.input);
  if (!data.ok()) return data.status().WithContext("cannot read model file");
  if (data->compare(0, 4, "GGUF") == 0) {
    return Status::InvalidArgument(o.input + " is already a GGUF file; convert takes a llama2.c "
                                   "checkpoint (.bin), and tierkv loads GGUF files as they are");
  }
  ASSIGN_OR_RETURN(model::LoadedModel m, model::ParseLlama2c(o.input, *data));
  const ModelConfig& c = m.config;
  model::GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetString("general.name", o.name.empty() ? "tierkv-converted" : o.name);
  w.SetU32("general.alignment", model::kGgufAlignment);
  w.SetU32("general.file_type", o.f16 ? 1 : 0);
  w.SetU32("llama.context_length", c.context_length);
  w.SetU32("llama.embedding_length", c.dim);
  w.SetU32("llama.feed_forward_length", c.hidden_dim);
  w.SetU32("llama.block_count", c.n_layers);
  w.SetU32("llama.attention.head_count", c.n_heads);
  w.SetU32("llama.attention.head_count_kv", c.n_kv_heads);
  w.SetU32("llama.rope.dimension_count", c.head_dim());
  w.SetF32("llama.rope.freq_base", c.rope_theta);
  w.SetF32("llama.attention.layer_norm_rms_epsilon", c.norm_eps);
  if (!o.tokenizer.empty()) {
    Vocab v;
    if (o.tokenizer.size() >= 6 && o.tokenizer.compare(o.tokenizer.size() - 6, 6, ".model") == 0) {
      ASSIGN_OR_RETURN(v, VocabFromSentencePiece(o.tokenizer));
    } else {
      ASSIGN_OR_RETURN(v, ReadLlama2cVocab(o.tokenizer, c.vocab_size, fs));
    }
    if (static_cast<int>(v.pieces.size()) != c.vocab_size) {
      return Status::InvalidArgument("tokenizer " + o.tokenizer + " has " +
                                     std::to_string(v.pieces.size()) +
                                     " tokens, the model's vocabulary has " +
                                     std::to_string(c.vocab_size));
    }
    w.SetString("tokenizer.ggml.model", "llama");
    w.SetStrings("tokenizer.ggml.tokens", v.pieces);
    w.SetF32s("tokenizer.ggml.scores", v.scores);
    w.SetI32s("tokenizer.ggml.token_type", v.types);
    w.SetBool("tokenizer.ggml.remove_extra_whitespaces", v.remove_extra_whitespaces);
    w.SetU32("tokenizer.ggml.bos_token_id", v.bos_id);
    w.SetU32("tokenizer.ggml.eos_token_id", v.eos_id);
    w.SetU32("tokenizer.ggml.unknown_token_id", v.unk_id);
  }
  const auto mat = o.f16 ? model::GgmlType::kF16 : model::GgmlType::kF32;
  const auto vec = model::GgmlType::kF32;
  const uint64_t dim = c.dim, kvd = c.kv_dim(), hid = c.hidden_dim, V = c.vocab_size;
  w.AddTensor("token_embd.weight", {dim, V}, mat, m.weights.tok_embd.FloatValues());
  w.AddTensor("output_norm.weight", {dim}, vec, m.weights.output_norm);
  if (!m.weights.output.empty()) w.AddTensor("output.weight", {dim, V}, mat, m.weights.output.FloatValues());
  for (int l = 0; l < c.n_layers; ++l) {
    const auto& L = m.weights.layers[l];
    const std::vector<float> wqkv = L.wqkv.FloatValues(), w13 = L.w13.FloatValues();
    const std::string p = "blk." + std::to_string(l) + ".";
    w.AddTensor(p + "attn_norm.weight", {dim}, vec, L.attn_norm);
    w.AddTensor(p + "attn_q.weight", {dim, dim}, mat, Rows(wqkv, 0, dim, dim));
    w.AddTensor(p + "attn_k.weight", {dim, kvd}, mat, Rows(wqkv, dim, kvd, dim));
    w.AddTensor(p + "attn_v.weight", {dim, kvd}, mat, Rows(wqkv, dim + kvd, kvd, dim));
    w.AddTensor(p + "attn_output.weight", {dim, dim}, mat, L.wo.FloatValues());
    w.AddTensor(p + "ffn_norm.weight", {dim}, vec, L.ffn_norm);
    w.AddTensor(p + "ffn_gate.weight", {dim, hid}, mat, Rows(w13, 0, hid, dim));
    w.AddTensor(p + "ffn_up.weight", {dim, hid}, mat, Rows(w13, hid, hid, dim));
    w.AddTensor(p + "ffn_down.weight", {hid, dim}, mat, L.w2.FloatValues());
  }
  return WriteFileAtomically(fs, o.output, w.Serialize());
}

}  // namespace tierkv

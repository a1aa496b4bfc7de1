// Writes the fuzzers' seed corpora (committed under tests/fuzz/corpus/):
// valid inputs of each format, so that fuzzing starts from the real shapes.
// Usage: fuzz_make_seeds DIR   (then copy DIR/* over tests/fuzz/corpus/)
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "model/gguf.h"
#include "store/format.h"
#include "store/manifest.h"

namespace {

void Write(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string Gguf() {
  tierkv::model::GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetU32("llama.block_count", 1);
  w.SetStrings("tokenizer.ggml.tokens", {"<unk>", "<s>", "a", "bc"});
  w.AddTensor("token_embd.weight", {4, 2}, tierkv::model::GgmlType::kF32, {1, 2, 3, 4, 5, 6, 7, 8});
  w.AddTensor("blk.0.attn_norm.weight", {4}, tierkv::model::GgmlType::kF16, {1, 0.5f, 0.25f, 2});
  return w.Serialize();
}

// Quantized tensors (a 32-block and a 256-block type) and a byte-level BPE
// vocabulary with merges and a pre-tokenizer.
std::string QuantizedBpeGguf() {
  tierkv::model::GgufWriter w;
  w.SetString("general.architecture", "qwen2");
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", "qwen2");
  w.SetStrings("tokenizer.ggml.tokens", {"H", "e", "l", "o", "He", "ll", "Hell", "\xc4\xa0", "<|im_start|>", "[PAD1]"});
  w.SetI32s("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 1, 1, 1, 3, 4});
  w.SetStrings("tokenizer.ggml.merges", {"H e", "l l", "He ll"});
  w.SetU32("tokenizer.ggml.bos_token_id", 8);
  std::vector<float> v(256);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 17) - 8.f;
  w.AddTensor("a.weight", {32, 8}, tierkv::model::GgmlType::kQ4_0, v);
  w.AddTensor("b.weight", {256}, tierkv::model::GgmlType::kQ6_K, v);
  return w.Serialize();
}

// A whole (tiny) model whose matrices mix types, so that the fuzzer starts
// from a file the loader accepts and runs.
std::string TinyModelGguf() {
  using tierkv::model::GgmlType;
  tierkv::model::GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetU32("llama.embedding_length", 32);
  w.SetU32("llama.feed_forward_length", 64);
  w.SetU32("llama.block_count", 1);
  w.SetU32("llama.attention.head_count", 2);
  w.SetU32("llama.context_length", 8);
  auto values = [](size_t n) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>(i * 7 % 13) - 6) / 16.f;
    return v;
  };
  const std::vector<float> ones(32, 1.f);
  w.AddTensor("token_embd.weight", {32, 16}, GgmlType::kQ8_0, values(512));
  w.AddTensor("output_norm.weight", {32}, GgmlType::kF32, ones);
  w.AddTensor("blk.0.attn_norm.weight", {32}, GgmlType::kF32, ones);
  w.AddTensor("blk.0.attn_q.weight", {32, 32}, GgmlType::kQ4_0, values(1024));
  w.AddTensor("blk.0.attn_k.weight", {32, 32}, GgmlType::kF16, values(1024));
  w.AddTensor("blk.0.attn_v.weight", {32, 32}, GgmlType::kQ8_0, values(1024));
  w.AddTensor("blk.0.attn_output.weight", {32, 32}, GgmlType::kF32, values(1024));
  w.AddTensor("blk.0.ffn_norm.weight", {32}, GgmlType::kF32, ones);
  w.AddTensor("blk.0.ffn_gate.weight", {32, 64}, GgmlType::kQ4_0, values(2048));
  w.AddTensor("blk.0.ffn_up.weight", {32, 64}, GgmlType::kQ5_1, values(2048));
  w.AddTensor("blk.0.ffn_down.weight", {64, 32}, GgmlType::kQ8_0, values(2048));
  return w.Serialize();
}

std::string Record(tierkv::store::RecordKind kind, uint32_t tokens, uint32_t row_bytes) {
  tierkv::store::RecordHeader h;
  h.fingerprint = 0x5eed;
  h.kind = kind;
  h.dtype = tierkv::store::KvDtype::kF16;
  h.layer = 1;
  h.first_token = 64;
  h.token_count = tokens;
  h.row_bytes = row_bytes;
  h.prefix_hash = 0x1234;
  h.parent_hash = 0x99;
  h.sequence = 7;
  for (uint32_t i = 0; i < tokens; ++i) h.tokens.push_back(static_cast<int32_t>(100 + i));
  const size_t payload = tokens * row_bytes * (kind == tierkv::store::RecordKind::kKeyValue ? 2 : 1);
  std::string bytes(payload, '\0');
  for (size_t i = 0; i < payload; ++i) bytes[i] = static_cast<char>(i * 31);
  std::string out;
  tierkv::store::EncodeRecord(h, bytes, &out);
  return out;
}

std::string Manifest() {
  tierkv::store::Manifest m;
  m.fingerprint = 0x5eed;
  m.chunk_tokens = 16;
  m.layers = 2;
  m.log_from = 3;
  m.sequence = 40;
  m.segments = {1, 2};
  tierkv::store::ManifestChunk a;
  a.prefix_hash = 0x10;
  a.tokens = std::vector<int32_t>(16, 5);
  a.where = {{1, 0}, {1, 2}};
  a.probe_block = 4;
  a.probe_stride = 1;
  tierkv::store::ManifestChunk b = a;
  b.prefix_hash = 0x20;
  b.parent_hash = 0x10;
  b.first_token = 16;
  b.where = {{2, 0}, {2, 2}};
  b.probe_block = UINT32_MAX;
  m.chunks = {a, b};
  return tierkv::store::EncodeManifest(m);
}

// Version 3's parts: a chunk's page checksums and a reordered run of both.
std::string ManifestWithRun() {
  tierkv::store::Manifest m = tierkv::store::DecodeManifest(Manifest()).value();
  m.chunks[0].pages = 2;
  m.chunks[0].page_checksums = {1, 2, 3, 4};
  tierkv::store::ManifestRun r;
  r.first_token = 0;
  r.rows = 32;
  r.records = 2;
  r.end_hash = 0x20;
  r.hashes = {0x10, 0x20};
  r.where = {{2, 8}, {2, 10}, {2, 12}, {2, 14}};
  for (uint16_t l = 0; l < 2; ++l) {
    for (uint16_t row = 0; row < 32; ++row) r.slot_of.push_back(static_cast<uint16_t>(31 - row));
  }
  m.runs = {r};
  return tierkv::store::EncodeManifest(m);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string usage = std::string("usage: ") + argv[0] +
                            " DIR\nWrites the fuzzers' seed inputs under DIR (then copy DIR/* over "
                            "tests/fuzz/corpus/).\n";
  if (argc == 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::fputs(usage.c_str(), stdout);
    return 0;
  }
  // A directory name that starts with '-' is almost surely a mistyped option.
  if (argc != 2 || argv[1][0] == '-') {
    std::fputs(usage.c_str(), stderr);
    return 2;
  }
  const std::string dir = argv[1];
  Write(dir + "/gguf/tiny.gguf", Gguf());
  Write(dir + "/gguf/quantized-bpe.gguf", QuantizedBpeGguf());
  Write(dir + "/gguf/tiny-model.gguf", TinyModelGguf());
  Write(dir + "/record/kv.rec", Record(tierkv::store::RecordKind::kKeyValue, 16, 128));
  Write(dir + "/record/probe.rec", Record(tierkv::store::RecordKind::kProbeKeys, 16, 64));
  Write(dir + "/manifest/two-chunks.manifest", Manifest());
  Write(dir + "/manifest/run-and-checksums.manifest", ManifestWithRun());
  Write(dir + "/prompt/plain.jsonl", "{\"prefix\": \"Once upon a time\", \"query\": \" there was\"}");
  Write(dir + "/prompt/escapes.jsonl",
        "{\"prefix\": \"caf\\u00e9 \\\"quoted\\\"\\n\\ttab\", \"query\": \" \\ud83d\\ude00?\"}");
  Write(dir + "/prompt/missing.jsonl", "{\"prefix\": \"x\"}");
  return 0;
}

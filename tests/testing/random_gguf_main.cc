// random_gguf: writes a random-weight GGUF model of a real model's shape, in
// one matrix type, for the decode and batch benchmarks (docs/engine.md):
//   random_gguf --shape llama-3.2-1b --type Q4_K
//     --vocab ../shared/reference/tokenizers/ggml-vocab-llama-bpe.gguf --out m.gguf  (one line)
// Llama-3.2-1B's shape: dim 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192,
// output tied to the embeddings, Llama 3.1's rope_freqs; the vocabulary (and
// its size) comes from --vocab. Weights are seeded (--seed), so the same
// command writes the same file.
#include <cstdio>
#include <cstring>
#include <string>

#include "model/quant.h"
#include "testing/random_model.h"

int main(int argc, char** argv) {
  std::string shape = "llama-3.2-1b", type = "F16", vocab, out;
  uint32_t seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--shape") shape = v;
    else if (k == "--type") type = v;
    else if (k == "--vocab") vocab = v;
    else if (k == "--out") out = v;
    else if (k == "--seed") seed = static_cast<uint32_t>(std::stoul(v));
    else {
      std::fprintf(stderr, "random_gguf: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (vocab.empty() || out.empty() || shape != "llama-3.2-1b") {
    std::fprintf(stderr,
                 "usage: random_gguf --shape llama-3.2-1b --type TYPE --vocab VOCAB.gguf --out FILE [--seed N]\n");
    return 2;
  }
  auto t = tierkv::model::ParseGgmlType(type);
  if (!t.ok()) {
    std::fprintf(stderr, "random_gguf: %s\n", t.status().ToString().c_str());
    return 2;
  }
  tierkv::testing::RandomModelSpec s;
  s.arch = "llama";
  s.vocab_file = vocab;
  s.tied = true;
  s.rope_factors = true;
  s.seed = seed;
  s.dim = 2048;
  s.heads = 32;
  s.kv_heads = 8;
  s.hidden = 8192;
  s.layers = 16;
  s.context = 8192;
  s.matrix_type = *t;
  try {
    tierkv::testing::WriteRandomModel(out, s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "random_gguf: %s\n", e.what());
    return 1;
  }
  return 0;
}

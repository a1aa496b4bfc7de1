// Small models written to disk for tests that must not depend on ../shared.
#pragma once

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "tierkv/model.h"

namespace tierkv::testing {

// Writes a llama2.c legacy checkpoint with random weights (N(0, 0.1), norms
// near 1) and returns its bytes.
inline std::string MakeLlama2cBytes(const ModelConfig& c, bool shared_classifier, uint32_t seed) {
  const int32_t header[7] = {c.dim,        c.hidden_dim,
                             c.n_layers,   c.n_heads,
                             c.n_kv_heads, shared_classifier ? c.vocab_size : -c.vocab_size,
                             c.context_length};
  std::string out(reinterpret_cast<const char*>(header), sizeof header);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.1f);
  const size_t dim = c.dim, hid = c.hidden_dim, L = c.n_layers, kvd = c.kv_dim(),
               V = c.vocab_size, hd = c.head_dim(), S = c.context_length;
  auto put = [&](size_t n, bool norm) {
    for (size_t i = 0; i < n; ++i) {
      float f = norm ? 1.0f + nd(rng) : nd(rng);
      out.append(reinterpret_cast<const char*>(&f), 4);
    }
  };
  put(V * dim, false);
  put(L * dim, true);
  put(L * dim * dim, false);
  put(L * kvd * dim, false);
  put(L * kvd * dim, false);
  put(L * dim * dim, false);
  put(L * dim, true);
  put(L * hid * dim, false);
  put(L * dim * hid, false);
  put(L * hid * dim, false);
  put(dim, true);
  put(S * hd, false);  // freq_cis, ignored by the loader
  if (!shared_classifier) put(V * dim, false);
  return out;
}

inline ModelConfig TinyConfig(int n_heads = 4, int n_kv_heads = 2) {
  ModelConfig c;
  c.dim = 32;
  c.hidden_dim = 48;
  c.n_layers = 3;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.vocab_size = 64;
  c.context_length = 128;
  return c;
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f) {
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
}

}  // namespace tierkv::testing

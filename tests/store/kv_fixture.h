// Deterministic K/V for store tests: the bytes of a token's row depend on the
// whole prefix up to that token (as real K/V do), its layer and K or V, so a
// shared prefix has the same rows in every prompt and any misplaced byte shows.
#pragma once

#include <unistd.h>
#include <xxhash.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "store/chunk_store.h"

namespace tierkv::store::testing {

inline void FillRow(std::span<const int32_t> prefix_through_token, uint16_t layer, char kind,
                    char* out, size_t row_bytes) {
  uint64_t seed = XXH3_64bits_withSeed(prefix_through_token.data(),
                                       prefix_through_token.size_bytes(), layer * 131u + kind);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < row_bytes; i += 8) {
    uint64_t v = rng();
    std::memcpy(out + i, &v, std::min<size_t>(8, row_bytes - i));
  }
}

// Owns the bytes KvInput points into.
struct PromptKv {
  std::vector<std::string> k, v;
  KvInput input;

  PromptKv(std::span<const int32_t> tokens, uint16_t layers, uint32_t row_bytes) {
    k.resize(layers);
    v.resize(layers);
    for (uint16_t l = 0; l < layers; ++l) {
      k[l].resize(tokens.size() * row_bytes);
      v[l].resize(tokens.size() * row_bytes);
      for (size_t t = 0; t < tokens.size(); ++t) {
        FillRow(tokens.first(t + 1), l, 'K', k[l].data() + t * row_bytes, row_bytes);
        FillRow(tokens.first(t + 1), l, 'V', v[l].data() + t * row_bytes, row_bytes);
      }
      input.k.emplace_back(k[l]);
      input.v.emplace_back(v[l]);
    }
  }
};

// A prompt whose first `shared` tokens are common to every prompt.
inline std::vector<int32_t> Prompt(uint32_t seed, size_t shared, size_t length) {
  std::vector<int32_t> t;
  std::mt19937 common(7), own(seed);
  for (size_t i = 0; i < length; ++i) {
    t.push_back(static_cast<int32_t>(i < shared ? common() % 500 : own() % 500));
  }
  return t;
}

// A fresh directory under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/tierkv_store_XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf " + path_).c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Flips one bit of the byte at `offset` of a file (damage for corruption tests).
inline void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

}  // namespace tierkv::store::testing

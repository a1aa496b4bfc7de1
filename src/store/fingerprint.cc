#include "store/fingerprint.h"

#include <xxhash.h>

#include <string>

namespace tierkv::store {

uint64_t Fingerprint(const FingerprintInput& in) {
  std::string s = "tierkv-fingerprint-v1\n";
  s += "weights " + std::to_string(in.weights_hash) + "\n";
  s += "arch " + in.architecture + "\n";
  s += "tokenizer " + std::to_string(in.tokenizer_hash) + "\n";
  s += "dtype " + std::to_string(static_cast<int>(in.dtype)) + "\n";
  s += "chunk " + std::to_string(in.chunk_tokens) + "\n";
  return XXH3_64bits(s.data(), s.size());
}

}  // namespace tierkv::store

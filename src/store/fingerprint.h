// The namespace of stored K/V: a chunk written for one model, tokenizer, KV
// dtype or chunk size must never be served to another.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "store/format.h"

namespace tierkv::store {

struct FingerprintInput {
  uint64_t weights_hash = 0;    // Model::content_hash()
  std::string architecture;     // e.g. "llama dim=256 layers=8 heads=16 kv_heads=16 ctx=4096"
  uint64_t tokenizer_hash = 0;  // hash of the tokenizer's pieces and scores
  KvDtype dtype = KvDtype::kF16;
  uint32_t chunk_tokens = 64;
};

// A 64-bit digest of every field (xxh3).
uint64_t Fingerprint(const FingerprintInput& in);

}  // namespace tierkv::store

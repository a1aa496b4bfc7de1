// Key/value row views: how KV crosses the boundary between the engine and
// the cache layer. Views never own memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tierkv {

enum class KvDType : uint8_t { kF32 = 0, kF16 = 1 };

inline size_t KvDTypeSize(KvDType t) { return t == KvDType::kF16 ? 2 : 4; }
inline std::string_view KvDTypeName(KvDType t) { return t == KvDType::kF16 ? "f16" : "f32"; }

// Rows of one (layer, KV head): row i has a key and a value of head_dim
// elements, at k + i*k_stride and v + i*v_stride, and sits at absolute
// position positions[i] of the prompt. Keys are stored after RoPE. Rows may be
// given in any order and any subset of the prefix.
struct KvRows {
  const void* k = nullptr;
  const void* v = nullptr;
  KvDType dtype = KvDType::kF32;
  size_t count = 0;
  size_t k_stride = 0;  // elements between rows; 0 means head_dim (dense)
  size_t v_stride = 0;
  const int32_t* positions = nullptr;  // nullptr means 0, 1, ..., count-1
};

}  // namespace tierkv

// GGUF (version 2 and 3) reading and writing: metadata and tensors of the
// types model/quant.h knows (F32, F16, BF16, Q4_0..Q8_0, Q2_K..Q6_K).
// The reader validates every count, length and offset against the file, and
// names the key or tensor at fault.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "model/quant.h"
#include "tierkv/status.h"

namespace tierkv::model {

enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

struct GgufValue {
  GgufType type = GgufType::kU32;
  // Scalars: integers in i (bool as 0/1), floats in f; strings in s.
  int64_t i = 0;
  double f = 0;
  std::string s;
  // Arrays: element type and elements (numbers in nums, strings in strs).
  GgufType elem_type = GgufType::kU32;
  std::vector<double> nums;
  std::vector<std::string> strs;
};

struct GgufTensor {
  std::string name;
  std::vector<uint64_t> dims;  // ne[0] is the innermost (contiguous) dimension
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;         // from the start of the data section
  uint64_t n_elements() const;
  uint64_t n_bytes() const;  // whole blocks of its type
};

// A parsed GGUF file; tensor data stays in the caller's buffer, which must
// outlive it.
class GgufFile {
 public:
  static Result<GgufFile> Parse(const std::string& name, std::string_view data);

  bool Has(const std::string& key) const { return kv_.count(key) > 0; }
  Result<int64_t> GetInt(const std::string& key) const;
  Result<double> GetFloat(const std::string& key) const;
  Result<std::string> GetString(const std::string& key) const;
  Result<std::vector<std::string>> GetStrings(const std::string& key) const;
  Result<std::vector<double>> GetNumbers(const std::string& key) const;

  const GgufTensor* FindTensor(const std::string& name) const;
  // Every tensor's name, sorted.
  std::vector<std::string> TensorNames() const;
  // The tensor, its shape checked against `dims` (errors name it).
  Result<const GgufTensor*> Tensor(const std::string& name, const std::vector<uint64_t>& dims) const;
  // Its bytes in the caller's buffer (n_bytes() of them, checked at Parse).
  const uint8_t* TensorData(const GgufTensor& t) const;
  // The tensor converted to fp32; checks its shape against `dims`.
  Result<std::vector<float>> ReadTensor(const std::string& name,
                                        const std::vector<uint64_t>& dims) const;
  uint32_t version() const { return version_; }
  // Every metadata key and value, by key.
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }

 private:
  std::string name_;
  std::string_view data_;
  uint32_t version_ = 0;
  uint64_t data_start_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::map<std::string, GgufTensor> tensors_;
};

class GgufWriter {
 public:
  void SetU32(const std::string& key, uint32_t v);
  void SetI32(const std::string& key, int32_t v);
  void SetF32(const std::string& key, float v);
  void SetBool(const std::string& key, bool v);
  void SetString(const std::string& key, const std::string& v);
  void SetStrings(const std::string& key, const std::vector<std::string>& v);
  void SetF32s(const std::string& key, const std::vector<float>& v);
  void SetI32s(const std::string& key, const std::vector<int32_t>& v);
  // A value as GgufFile read it (arrays keep their element type).
  void SetValue(const std::string& key, const GgufValue& v);
  // dims as GGUF ne: innermost first; values quantized to `type` (dims[0]
  // a multiple of its block size).
  void AddTensor(const std::string& name, std::vector<uint64_t> dims, GgmlType type,
                 const std::vector<float>& values);
  std::string Serialize() const;

 private:
  std::string kv_bytes_;
  uint64_t kv_count_ = 0;
  struct Pending {
    std::string name;
    std::vector<uint64_t> dims;
    GgmlType type;
    std::string bytes;
  };
  std::vector<Pending> tensors_;
};

constexpr uint32_t kGgufAlignment = 32;

}  // namespace tierkv::model

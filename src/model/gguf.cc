#include "model/gguf.h"

#include <algorithm>

#include <cstring>

#include "kernels/fp16.h"

namespace tierkv::model {
namespace {

constexpr uint64_t kMaxCount = 1ull << 24;       // keys, tensors, array elements
constexpr uint64_t kMaxString = 1ull << 24;      // one string

class Reader {
 public:
  Reader(const std::string& name, std::string_view d) : name_(name), d_(d) {}

  template <typename T>
  Status Read(T* out, const char* what) {
    if (d_.size() - pos_ < sizeof(T) || pos_ > d_.size()) return Truncated(what);
    std::memcpy(out, d_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  Status ReadString(std::string* out, const std::string& what) {
    uint64_t n = 0;
    RETURN_IF_ERROR(Read(&n, what.c_str()));
    if (n > kMaxString) {
      return Status::Corruption(name_ + ": " + what + " has length " + std::to_string(n) +
                                " (at offset " + std::to_string(pos_ - 8) + "), too long");
    }
    if (d_.size() - pos_ < n) return Truncated(what);
    out->assign(d_.data() + pos_, n);
    pos_ += n;
    return Status::Ok();
  }

  Status Truncated(const std::string& what) const {
    return Status::Corruption(name_ + ": GGUF file truncated at offset " + std::to_string(pos_) +
                              " while reading " + what);
  }
  uint64_t pos() const { return pos_; }

 private:
  const std::string& name_;
  std::string_view d_;
  uint64_t pos_ = 0;
};

Status ReadScalar(Reader& r, GgufType t, GgufValue* v, const std::string& what, double* num,
                  std::string* str) {
  switch (t) {
#define TIERKV_GGUF_INT(E, T)                 \
  case GgufType::E: {                         \
    T x{};                                    \
    RETURN_IF_ERROR(r.Read(&x, what.c_str())); \
    *num = static_cast<double>(x);            \
    if (v) v->i = static_cast<int64_t>(x);    \
    return Status::Ok();                      \
  }
    TIERKV_GGUF_INT(kU8, uint8_t)
    TIERKV_GGUF_INT(kI8, int8_t)
    TIERKV_GGUF_INT(kU16, uint16_t)
    TIERKV_GGUF_INT(kI16, int16_t)
    TIERKV_GGUF_INT(kU32, uint32_t)
    TIERKV_GGUF_INT(kI32, int32_t)
    TIERKV_GGUF_INT(kU64, uint64_t)
    TIERKV_GGUF_INT(kI64, int64_t)
    TIERKV_GGUF_INT(kBool, uint8_t)
#undef TIERKV_GGUF_INT
    case GgufType::kF32: {
      float x;
      RETURN_IF_ERROR(r.Read(&x, what.c_str()));
      *num = x;
      if (v) v->f = x;
      return Status::Ok();
    }
    case GgufType::kF64: {
      double x;
      RETURN_IF_ERROR(r.Read(&x, what.c_str()));
      *num = x;
      if (v) v->f = x;
      return Status::Ok();
    }
    case GgufType::kString:
      return r.ReadString(str, what);
    default:
      break;
  }
  return Status::Corruption(what + " has unknown value type " +
                            std::to_string(static_cast<uint32_t>(t)));
}

bool IsFloat(GgufType t) { return t == GgufType::kF32 || t == GgufType::kF64; }

}  // namespace

uint64_t GgufTensor::n_elements() const {
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  return n;
}

uint64_t GgufTensor::n_bytes() const {
  const GgmlTypeInfo i = *TypeInfo(static_cast<uint32_t>(type));  // checked when parsed
  return n_elements() / i.block_elems * i.block_bytes;
}

Result<GgufFile> GgufFile::Parse(const std::string& name, std::string_view data) {
  GgufFile f;
  f.name_ = name;
  f.data_ = data;
  Reader r(name, data);
  char magic[4];
  RETURN_IF_ERROR(r.Read(&magic, "magic"));
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    return Status::Corruption(name + ": bad magic (not a GGUF file)");
  }
  RETURN_IF_ERROR(r.Read(&f.version_, "version"));
  if (f.version_ != 2 && f.version_ != 3) {
    return Status::InvalidArgument(name + ": GGUF version " + std::to_string(f.version_) +
                                   " is not supported (2 and 3 are)");
  }
  uint64_t n_tensors, n_kv;
  RETURN_IF_ERROR(r.Read(&n_tensors, "tensor count"));
  RETURN_IF_ERROR(r.Read(&n_kv, "metadata count"));
  if (n_tensors > kMaxCount) {
    return Status::Corruption(name + ": tensor count " + std::to_string(n_tensors) + " is absurd");
  }
  if (n_kv > kMaxCount) {
    return Status::Corruption(name + ": metadata count " + std::to_string(n_kv) + " is absurd");
  }
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    RETURN_IF_ERROR(r.ReadString(&key, "key of metadata entry " + std::to_string(i)));
    const std::string what = "metadata '" + key + "'";
    uint32_t t;
    RETURN_IF_ERROR(r.Read(&t, what.c_str()));
    GgufValue v;
    v.type = static_cast<GgufType>(t);
    double num;
    if (v.type == GgufType::kArray) {
      uint32_t et;
      uint64_t n;
      RETURN_IF_ERROR(r.Read(&et, what.c_str()));
      RETURN_IF_ERROR(r.Read(&n, what.c_str()));
      if (n > kMaxCount) {
        return Status::Corruption(name + ": " + what + " has " + std::to_string(n) +
                                  " elements, too many");
      }
      v.elem_type = static_cast<GgufType>(et);
      if (v.elem_type == GgufType::kArray) {
        return Status::InvalidArgument(name + ": " + what + ": nested arrays are not supported");
      }
      for (uint64_t j = 0; j < n; ++j) {
        std::string s;
        Status st = ReadScalar(r, v.elem_type, nullptr, what, &num, &s);
        if (!st.ok()) return st.WithContext(name);
        if (v.elem_type == GgufType::kString) {
          v.strs.push_back(std::move(s));
        } else {
          v.nums.push_back(num);
        }
      }
    } else {
      Status st = ReadScalar(r, v.type, &v, what, &num, &v.s);
      if (!st.ok()) return st.WithContext(name);
    }
    if (f.kv_.count(key)) return Status::Corruption(name + ": duplicate " + what);
    f.kv_[key] = std::move(v);
  }
  uint64_t alignment = kGgufAlignment;
  if (f.Has("general.alignment")) {
    ASSIGN_OR_RETURN(int64_t a, f.GetInt("general.alignment"));
    if (a <= 0 || a > (1 << 20) || (a & (a - 1)) != 0) {
      return Status::Corruption(name + ": general.alignment=" + std::to_string(a) +
                                " is not a power of two");
    }
    alignment = static_cast<uint64_t>(a);
  }
  std::vector<GgufTensor> infos;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    RETURN_IF_ERROR(r.ReadString(&t.name, "name of tensor " + std::to_string(i)));
    const std::string what = "tensor '" + t.name + "'";
    uint32_t nd;
    RETURN_IF_ERROR(r.Read(&nd, what.c_str()));
    if (nd == 0 || nd > 4) {
      return Status::Corruption(name + ": " + what + " has " + std::to_string(nd) +
                                " dimensions (1 to 4 allowed)");
    }
    uint64_t n = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      uint64_t x;
      RETURN_IF_ERROR(r.Read(&x, what.c_str()));
      if (x == 0 || x > (1ull << 32) || n > (1ull << 40) / x) {
        return Status::Corruption(name + ": " + what + " dimension " + std::to_string(d) + " = " +
                                  std::to_string(x) + " is invalid");
      }
      n *= x;
      t.dims.push_back(x);
    }
    uint32_t type;
    RETURN_IF_ERROR(r.Read(&type, what.c_str()));
    auto info = TypeInfo(type);
    if (!info.ok()) return Status::InvalidArgument(name + ": " + what + ": " + info.status().message());
    if (t.dims[0] % info->block_elems != 0) {
      return Status::Corruption(name + ": " + what + " of type " + std::string(info->name) + " has rows of " +
                                std::to_string(t.dims[0]) + " elements, not a multiple of its block of " +
                                std::to_string(info->block_elems));
    }
    t.type = static_cast<GgmlType>(type);
    RETURN_IF_ERROR(r.Read(&t.offset, what.c_str()));
    if (t.offset % alignment != 0) {
      return Status::Corruption(name + ": " + what + " offset " + std::to_string(t.offset) +
                                " is not aligned to " + std::to_string(alignment));
    }
    infos.push_back(std::move(t));
  }
  f.data_start_ = (r.pos() + alignment - 1) / alignment * alignment;
  // A file without tensors (vocabulary only) may end with its metadata.
  if (infos.empty()) f.data_start_ = std::min<uint64_t>(f.data_start_, data.size());
  if (f.data_start_ > data.size()) return r.Truncated("padding before tensor data");
  const uint64_t data_size = data.size() - f.data_start_;
  for (auto& t : infos) {
    const uint64_t bytes = t.n_bytes();
    if (t.offset > data_size || bytes > data_size - t.offset) {
      return Status::Corruption(name + ": tensor '" + t.name + "' data [" +
                                std::to_string(t.offset) + ", +" + std::to_string(bytes) +
                                ") runs past the end of the file (truncated?)");
    }
    if (f.tensors_.count(t.name)) {
      return Status::Corruption(name + ": duplicate tensor '" + t.name + "'");
    }
    f.tensors_[t.name] = std::move(t);
  }
  // Each tensor's bytes are its own: data shared between two tensors means
  // a damaged or forged file.
  std::vector<const GgufTensor*> by_offset;
  for (const auto& [n, t] : f.tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensor& a = *by_offset[i - 1];
    const uint64_t end = a.offset + a.n_bytes();
    if (end > by_offset[i]->offset) {
      return Status::Corruption(name + ": tensor '" + a.name + "' data overlaps tensor '" +
                                by_offset[i]->name + "' (offsets " + std::to_string(a.offset) +
                                " and " + std::to_string(by_offset[i]->offset) + ")");
    }
  }
  return f;
}

std::vector<std::string> GgufFile::TensorNames() const {
  std::vector<std::string> out;
  for (const auto& [n, t] : tensors_) out.push_back(n);
  std::sort(out.begin(), out.end());
  return out;
}

Result<int64_t> GgufFile::GetInt(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return Status::NotFound(name_ + ": metadata '" + key + "' is missing");
  const GgufType t = it->second.type;
  if (t == GgufType::kString || t == GgufType::kArray || IsFloat(t)) {
    return Status::InvalidArgument(name_ + ": metadata '" + key + "' is not an integer");
  }
  return it->second.i;
}

Result<double> GgufFile::GetFloat(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return Status::NotFound(name_ + ": metadata '" + key + "' is missing");
  const GgufType t = it->second.type;
  if (t == GgufType::kString || t == GgufType::kArray) {
    return Status::InvalidArgument(name_ + ": metadata '" + key + "' is not a number");
  }
  return IsFloat(t) ? it->second.f : static_cast<double>(it->second.i);
}

Result<std::string> GgufFile::GetString(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return Status::NotFound(name_ + ": metadata '" + key + "' is missing");
  if (it->second.type != GgufType::kString) {
    return Status::InvalidArgument(name_ + ": metadata '" + key + "' is not a string");
  }
  return it->second.s;
}

Result<std::vector<std::string>> GgufFile::GetStrings(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return Status::NotFound(name_ + ": metadata '" + key + "' is missing");
  if (it->second.type != GgufType::kArray || it->second.elem_type != GgufType::kString) {
    return Status::InvalidArgument(name_ + ": metadata '" + key + "' is not a string array");
  }
  return it->second.strs;
}

Result<std::vector<double>> GgufFile::GetNumbers(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return Status::NotFound(name_ + ": metadata '" + key + "' is missing");
  if (it->second.type != GgufType::kArray || it->second.elem_type == GgufType::kString) {
    return Status::InvalidArgument(name_ + ": metadata '" + key + "' is not a number array");
  }
  return it->second.nums;
}

const GgufTensor* GgufFile::FindTensor(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Result<const GgufTensor*> GgufFile::Tensor(const std::string& tname, const std::vector<uint64_t>& dims) const {
  const GgufTensor* t = FindTensor(tname);
  if (t == nullptr) return Status::NotFound(name_ + ": tensor '" + tname + "' is missing");
  auto shape = [](const std::vector<uint64_t>& d) {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    return s + "]";
  };
  // Trailing dimensions of 1 are equivalent.
  std::vector<uint64_t> have = t->dims, want = dims;
  while (have.size() > 1 && have.back() == 1) have.pop_back();
  while (want.size() > 1 && want.back() == 1) want.pop_back();
  if (have != want) {
    return Status::InvalidArgument(name_ + ": tensor '" + tname + "' has shape " +
                                   shape(t->dims) + ", the model's config needs " + shape(dims));
  }
  return t;
}

const uint8_t* GgufFile::TensorData(const GgufTensor& t) const {
  return reinterpret_cast<const uint8_t*>(data_.data() + data_start_ + t.offset);
}

Result<std::vector<float>> GgufFile::ReadTensor(const std::string& tname,
                                                const std::vector<uint64_t>& dims) const {
  ASSIGN_OR_RETURN(const GgufTensor* t, Tensor(tname, dims));
  std::vector<float> out(t->n_elements());
  DequantizeRow(t->type, TensorData(*t), out.data(), out.size());  // rows are whole blocks: one long row
  return out;
}

// ---- writer ----

namespace {
template <typename T>
void Put(std::string* s, T v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void PutString(std::string* s, const std::string& v) {
  Put<uint64_t>(s, v.size());
  s->append(v);
}
// One scalar of type t: integers from i (or num for array elements), floats
// from f (or num), strings from str.
void PutScalar(std::string* s, GgufType t, int64_t i, double f, const std::string& str) {
  switch (t) {
    case GgufType::kU8: case GgufType::kBool: Put<uint8_t>(s, static_cast<uint8_t>(i)); break;
    case GgufType::kI8: Put<int8_t>(s, static_cast<int8_t>(i)); break;
    case GgufType::kU16: Put<uint16_t>(s, static_cast<uint16_t>(i)); break;
    case GgufType::kI16: Put<int16_t>(s, static_cast<int16_t>(i)); break;
    case GgufType::kU32: Put<uint32_t>(s, static_cast<uint32_t>(i)); break;
    case GgufType::kI32: Put<int32_t>(s, static_cast<int32_t>(i)); break;
    case GgufType::kU64: Put<uint64_t>(s, static_cast<uint64_t>(i)); break;
    case GgufType::kI64: Put<int64_t>(s, i); break;
    case GgufType::kF32: Put<float>(s, static_cast<float>(f)); break;
    case GgufType::kF64: Put<double>(s, f); break;
    default: PutString(s, str); break;
  }
}
}  // namespace

void GgufWriter::SetValue(const std::string& key, const GgufValue& v) {
  PutString(&kv_bytes_, key);
  Put<uint32_t>(&kv_bytes_, static_cast<uint32_t>(v.type));
  if (v.type != GgufType::kArray) {
    PutScalar(&kv_bytes_, v.type, v.i, v.f, v.s);
  } else {
    Put<uint32_t>(&kv_bytes_, static_cast<uint32_t>(v.elem_type));
    if (v.elem_type == GgufType::kString) {
      Put<uint64_t>(&kv_bytes_, v.strs.size());
      for (const auto& e : v.strs) PutString(&kv_bytes_, e);
    } else {
      Put<uint64_t>(&kv_bytes_, v.nums.size());
      for (double x : v.nums) PutScalar(&kv_bytes_, v.elem_type, static_cast<int64_t>(x), x, "");
    }
  }
  ++kv_count_;
}

void GgufWriter::SetU32(const std::string& key, uint32_t v) {
  PutString(&kv_bytes_, key);
  Put<uint32_t>(&kv_bytes_, static_cast<uint32_t>(GgufType::kU32));
  Put(&kv_bytes_, v);
  ++kv_count_;
}
void GgufWriter::SetI32(const std::string& key, int32_t v) {
  PutString(&kv_bytes_, key);
  Put<uint32_t>(&kv_bytes_, static_cast<uint32_t>(GgufType::kI32));
  Put(&kv_bytes_, v);
  ++kv_count_;
}
void GgufWriter::SetF32(const std::string& key, float v) {
  PutString(&kv_bytes_, key);
  Put<uint32_t>(&kv_bytes_, static_cast<uint32_t>(GgufType::kF32));
  Put(&kv_bytes_, v);
  ++kv_count_;
}
void GgufWriter::SetBool(const std::string& key, bool v) {
  PutString(&kv_bytes_, key);
  Put<uint32_t>(&kv_bytes_, static_cast<uint32_t>(GgufType::kBool));
  Put<uint8_t>(&kv_bytes_, v ? 1 : 0);
  ++kv_count_;
}
void GgufWriter::SetString(const std::string& key, const std::string& v) {
  PutString(&kv_bytes_, key);
  Put<uint32_t>(&kv_bytes_, static_cast<uint32_t>(GgufType::kString));
  PutString(&kv_bytes_, v);
  ++kv_count_;
}
void GgufWriter::SetStrings(const std::string& key, const std::vector<std::string>& v) {
  PutString(&kv_bytes_, key);
  Put<uint32_t>(&kv_bytes_, static_cast<uint32_t>(GgufType::kArray));
  Put<uint32_t>(&kv_bytes_, static_cast<uint32_t>(GgufType::kString));
  Put<uint64_t>(&kv_bytes_, v.size());
  for (const auto& s : v) PutString(&kv_bytes_, s);
  ++kv_count_;
}
void GgufWriter::SetF32s(const std::string& key, const std::vector<float>& v) {
  PutString(&kv_bytes_, key);
  Put<uint32_t>(&kv_bytes_, static_cast<uint32_t>(GgufType::kArray));
  Put<uint32_t>(&kv_bytes_, static_cast<uint32_t>(GgufType::kF32));
  Put<uint64_t>(&kv_bytes_, v.size());
  for (float f : v) Put(&kv_bytes_, f);
  ++kv_count_;
}
void GgufWriter::SetI32s(const std::string& key, const std::vector<int32_t>& v) {
  PutString(&kv_bytes_, key);
  Put<uint32_t>(&kv_bytes_, static_cast<uint32_t>(GgufType::kArray));
  Put<uint32_t>(&kv_bytes_, static_cast<uint32_t>(GgufType::kI32));
  Put<uint64_t>(&kv_bytes_, v.size());
  for (int32_t x : v) Put(&kv_bytes_, x);
  ++kv_count_;
}

void GgufWriter::AddTensor(const std::string& name, std::vector<uint64_t> dims, GgmlType type,
                           const std::vector<float>& values) {
  Pending p{name, std::move(dims), type, {}};
  QuantizeRow(type, values.data(), values.size(), &p.bytes);
  tensors_.push_back(std::move(p));
}

std::string GgufWriter::Serialize() const {
  std::string out("GGUF");
  Put<uint32_t>(&out, 3);
  Put<uint64_t>(&out, tensors_.size());
  Put<uint64_t>(&out, kv_count_);
  out += kv_bytes_;
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    PutString(&out, t.name);
    Put<uint32_t>(&out, static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) Put(&out, d);
    Put<uint32_t>(&out, static_cast<uint32_t>(t.type));
    Put<uint64_t>(&out, offset);
    offset += (t.bytes.size() + kGgufAlignment - 1) / kGgufAlignment * kGgufAlignment;
  }
  out.resize((out.size() + kGgufAlignment - 1) / kGgufAlignment * kGgufAlignment, '\0');
  for (const auto& t : tensors_) {
    out += t.bytes;
    out.resize((out.size() + kGgufAlignment - 1) / kGgufAlignment * kGgufAlignment, '\0');
  }
  return out;
}

}  // namespace tierkv::model

// QuantizeGguf (tierkv/convert.h): a GGUF model rewritten with its weight
// matrices in one tensor type, as llama.cpp's llama-quantize does for a pure
// type (without its importance search: model/quant.h's quantizers).
#include "model/gguf.h"
#include "tierkv/convert.h"

namespace tierkv {
namespace {

// llama.cpp's general.file_type (LLAMA_FTYPE_*) for a file of one type; the
// k-quants as their "_S" mixes, the closest to a single type.
uint32_t FileType(model::GgmlType t) {
  using model::GgmlType;
  switch (t) {
    case GgmlType::kF32: return 0;
    case GgmlType::kF16: return 1;
    case GgmlType::kQ4_0: return 2;
    case GgmlType::kQ4_1: return 3;
    case GgmlType::kQ8_0: return 7;
    case GgmlType::kQ5_0: return 8;
    case GgmlType::kQ5_1: return 9;
    case GgmlType::kQ2_K: return 10;
    case GgmlType::kQ3_K: return 11;
    case GgmlType::kQ4_K: return 14;
    case GgmlType::kQ5_K: return 16;
    case GgmlType::kQ6_K: return 18;
    case GgmlType::kBF16: return 32;
  }
  return 0;
}

}  // namespace

Status QuantizeGguf(const std::string& input, const std::string& output, const std::string& type, FileSystem* fs) {
  ASSIGN_OR_RETURN(model::GgmlType t, model::ParseGgmlType(type));
  ASSIGN_OR_RETURN(const model::GgmlTypeInfo info, model::TypeInfo(static_cast<uint32_t>(t)));
  ASSIGN_OR_RETURN(std::string data, ReadFileToString(fs, input));
  ASSIGN_OR_RETURN(model::GgufFile f, model::GgufFile::Parse(input, data));
  model::GgufWriter w;
  for (const auto& [key, value] : f.metadata()) {
    if (key != "general.file_type") w.SetValue(key, value);
  }
  w.SetU32("general.file_type", FileType(t));
  for (const std::string& name : f.TensorNames()) {
    const model::GgufTensor& tensor = *f.FindTensor(name);
    ASSIGN_OR_RETURN(std::vector<float> values, f.ReadTensor(name, tensor.dims));
    // Matrices whose rows are whole blocks take the type; vectors (norms)
    // stay F32, as llama-quantize keeps them.
    const bool matrix = tensor.dims.size() >= 2 && tensor.dims[0] % info.block_elems == 0;
    w.AddTensor(name, tensor.dims, matrix ? t : model::GgmlType::kF32, values);
  }
  return WriteFileAtomically(fs, output, w.Serialize());
}

}  // namespace tierkv

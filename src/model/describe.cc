// DescribeModelFile (tierkv/model.h).
#include "model/gguf.h"
#include "tierkv/model.h"

namespace tierkv {

Result<ModelFileInfo> DescribeModelFile(const std::string& path, FileSystem* fs) {
  ASSIGN_OR_RETURN(std::string data, ReadFileToString(fs, path));
  ModelFileInfo info;
  info.file_bytes = data.size();
  if (data.compare(0, 4, "GGUF") != 0) {
    info.format = "llama2c";
    return info;
  }
  info.format = "gguf";
  ASSIGN_OR_RETURN(model::GgufFile f, model::GgufFile::Parse(path, data));
  for (const std::string& name : f.TensorNames()) {
    const model::GgufTensor& t = *f.FindTensor(name);
    ASSIGN_OR_RETURN(const model::GgmlTypeInfo type, model::TypeInfo(static_cast<uint32_t>(t.type)));
    info.tensors.push_back({name, std::string(type.name), t.dims, t.n_bytes()});
  }
  return info;
}

}  // namespace tierkv

// libFuzzer target: the request-file reader (JSON, fields, documents and
// the requests that name them, choices and labels, tokenization with the
// default model's tokenizer) on arbitrary input, one line at a time.
#include <cstddef>
#include <cstdint>
#include <string>

#include "default_model.h"
#include "tierkv/tools/task_workload.h"

namespace {
tierkv::fuzz::DefaultModel loaded;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  loaded = tierkv::fuzz::LoadDefaultModel();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  tierkv::bench::TaskWorkloadReader reader(*loaded.tokenizer);
  size_t start = 0;
  for (int no = 1; start <= input.size(); ++no) {
    size_t end = input.find('\n', start);
    if (end == std::string::npos) end = input.size();
    reader.AddLine(input.substr(start, end - start), "fuzz.jsonl line " + std::to_string(no)).IgnoreError();
    start = end + 1;
  }
  return 0;
}

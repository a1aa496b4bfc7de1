// How tests reach llama.cpp and the project's Python environment: through
// tools/llamacpp/llamacpp, which tools/llamacpp/setup.sh makes usable
// (llama-cpp-python bound to llama.cpp built from its PyPI source, the
// official openai client). Needs TIERKV_SOURCE_DIR.
#pragma once

#include <string>

#include "testing/shell.h"

namespace tierkv::testing {

inline std::string LlamaCppTool() { return std::string(TIERKV_SOURCE_DIR) + "/tools/llamacpp/llamacpp"; }

// Empty when llama.cpp's oracle build and the Python environment are
// installed; otherwise the skip message, naming the command to run.
inline std::string LlamaCppMissing() {
  std::string out;
  if (Shell(LlamaCppTool() + " check 2>&1", &out) == 0) return "";
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out.empty() ? "needs llama.cpp: run bash tools/llamacpp/setup.sh (CI does)" : out;
}

// The command prefix that runs a script with the project's Python bound to
// the oracle's llama.cpp (portable AVX2: the same results on every CPU).
inline std::string ProjectPython() { return LlamaCppTool() + " python"; }

// tools/llamacpp/runner.py under the project's Python.
inline std::string LlamaCppRunner() {
  return ProjectPython() + " " + std::string(TIERKV_SOURCE_DIR) + "/tools/llamacpp/runner.py";
}

}  // namespace tierkv::testing

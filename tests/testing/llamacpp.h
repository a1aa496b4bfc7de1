// How tests reach llama.cpp and the project's Python environment: through
// tools/llamacpp/llamacpp, which tools/llamacpp/setup.sh makes usable
// (llama-cpp-python bound to llama.cpp built from its PyPI source, the
// official openai client). Needs TIERKV_SOURCE_DIR.
#pragma once

#include <string>

#include "testing/shared.h"
#include "testing/shell.h"

namespace tierkv::testing {

inline std::string LlamaCppTool() { return std::string(TIERKV_SOURCE_DIR) + "/tools/llamacpp/llamacpp"; }

// Empty when llama.cpp's oracle build and the Python environment are
// installed; otherwise the skip message, naming the command to run. Asked
// once per process (each test's check and skip message share the answer).
inline std::string LlamaCppMissing() {
  static const std::string missing = [] {
    std::string out;
    if (Shell(LlamaCppTool() + " check 2>&1", &out) == 0) return std::string();
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out.empty() ? std::string("needs llama.cpp: run bash tools/llamacpp/setup.sh (CI does)") : out;
  }();
  return missing;
}

// Why an oracle test against llama.cpp on text from ../shared cannot run
// (llama.cpp missing, or `shared_file` under ../shared), or empty.
inline std::string OracleMissing(const std::string& shared_file) {
  if (std::string why = LlamaCppMissing(); !why.empty()) return why;
  if (!SharedExists(shared_file)) {
    return "needs ../shared/" + shared_file + " (CI has it; a fresh clone without ../shared skips this test)";
  }
  return "";
}

// The command prefix that runs a script with the project's Python bound to
// the oracle's llama.cpp (portable AVX2: the same results on every CPU).
inline std::string ProjectPython() { return LlamaCppTool() + " python"; }

// tools/llamacpp/runner.py under the project's Python.
inline std::string LlamaCppRunner() {
  return ProjectPython() + " " + std::string(TIERKV_SOURCE_DIR) + "/tools/llamacpp/runner.py";
}

}  // namespace tierkv::testing

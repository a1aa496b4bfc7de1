// Paths to ../shared (models and data). CI always has it; a fresh clone may
// not, and tests that need it skip with a message saying so.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

namespace tierkv::testing {

inline std::string SharedPath(const std::string& rel) {
  return std::string(TIERKV_SHARED_DIR) + "/" + rel;
}
inline bool SharedExists(const std::string& rel) {
  return ::access(SharedPath(rel).c_str(), R_OK) == 0;
}
inline std::string Stories(const std::string& file) {
  return SharedPath("models/stories260K/" + file);
}

// A fresh directory under the test's temp dir, removed by the caller if it wishes.
inline std::string MakeTempDir(const std::string& tag) {
  std::string tmpl = ::testing::TempDir() + "tierkv_" + tag + "_XXXXXX";
  char* d = ::mkdtemp(tmpl.data());
  return d ? std::string(d) : std::string();
}

}  // namespace tierkv::testing

#define TIERKV_REQUIRE_SHARED(rel)                                                          \
  do {                                                                                      \
    if (!::tierkv::testing::SharedExists(rel)) {                                            \
      GTEST_SKIP() << "needs ../shared/" << (rel)                                           \
                   << " (CI has it; a fresh clone without ../shared skips this test)";      \
    }                                                                                       \
  } while (0)

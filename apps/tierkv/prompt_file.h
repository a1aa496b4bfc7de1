// What check, compare and bench share besides the engine's flags
// (engine_flags.h): the request file's flag and a scratch store directory.
// Request files are read by tierkv/tools/task_workload.h (errors name the file,
// line and field).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "tierkv/status.h"

namespace tierkv::app {

// A scratch directory for a command's store: `flag` if set (kept), else a
// new directory under $TMPDIR or /var/tmp, removed when this goes away.
class ScratchDir {
 public:
  static Result<ScratchDir> Make(const std::string& flag, const std::string& name);
  ScratchDir(ScratchDir&& o) noexcept : path_(std::move(o.path_)), remove_(o.remove_) { o.remove_ = false; }
  ~ScratchDir();
  const std::string& path() const { return path_; }

 private:
  ScratchDir(std::string path, bool remove) : path_(std::move(path)), remove_(remove) {}
  std::string path_;
  bool remove_ = false;
};

// --prompt-file (required): check's and compare's request file.
void AddPromptFileFlag(CLI::App* sub, std::string* path);

}  // namespace tierkv::app

#include "prompt_file.h"

#include <cstdlib>
#include <filesystem>

#include "signals.h"

namespace tierkv::app {

Result<ScratchDir> ScratchDir::Make(const std::string& flag, const std::string& name) {
  if (!flag.empty()) return ScratchDir(flag, false);
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/var/tmp") + "/tierkv-" + name + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return Status::IOError("cannot create a directory " + tmpl);
  RegisterScratch(tmpl);  // removed on SIGINT/SIGTERM too
  return ScratchDir(tmpl, true);
}

ScratchDir::~ScratchDir() {
  if (remove_) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    UnregisterScratch(path_);
  }
}

void AddPromptFileFlag(CLI::App* sub, std::string* path) {
  sub->add_option("--prompt-file", *path,
                  "Request file: JSON Lines of {\"prefix\", \"query\"} (docs/workloads.md: shared documents, "
                  "choices and labels too); each request (BOS, prefix, query and its longest choice) must fit "
                  "the model's context")
      ->required();
}

}  // namespace tierkv::app

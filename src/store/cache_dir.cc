#include "store/cache_dir.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "store/format.h"
#include "store/io_model.h"
#include "tierkv/hex.h"
#include "tierkv/logging.h"

namespace tierkv::store {
namespace {

bool IsOwnerFile(const StoreOptions& o, const std::string& name) {
  for (const std::string& f : o.owner_files) {
    if (name == f || name == f + ".tmp") return true;
  }
  return false;
}

constexpr const char* kStoreMagic = "tierkv-store";

}  // namespace

uint32_t SegmentNumber(const std::string& name) {
  if (name.size() != 14 || name.compare(0, 4, "seg-") != 0 || name.compare(10, 4, ".tkv") != 0) {
    return 0;
  }
  uint32_t n = 0;
  for (size_t i = 4; i < 10; ++i) {
    if (name[i] < '0' || name[i] > '9') return 0;
    n = n * 10 + static_cast<uint32_t>(name[i] - '0');
  }
  return n;
}

namespace {

std::string StoreIdentity(const StoreOptions& o) {
  std::ostringstream s;
  s << kStoreMagic << " " << kFormatVersion << "\n"
    << "fingerprint " << Hex64(o.fingerprint) << "\n"
    << "chunk_tokens " << o.chunk_tokens << "\n"
    << "layers " << o.layers << "\n"
    << "row_bytes " << o.row_bytes << "\n"
    << "dtype " << (o.dtype == KvDtype::kF16 ? "f16" : "f32") << "\n";
  // Only when set, so that stores written without probe copies keep their identity.
  if (o.probe_bytes != 0) s << "probe_bytes " << o.probe_bytes << "\n";
  return s.str();
}

// The identity plus the human-readable model line, which is informative only
// (the fingerprint is what must match).
std::string StoreIdentityFile(const StoreOptions& o) {
  std::string desc = o.model_description;
  std::replace(desc.begin(), desc.end(), '\n', ' ');
  return StoreIdentity(o) + "model " + desc + "\n";
}

// The identity lines of an identity file (everything but "model").
std::string IdentityPart(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) {
    if (line.compare(0, 6, "model ") == 0) continue;
    out += line + "\n";
  }
  return out;
}

std::string ValueOf(const std::string& text, const std::string& key);

}  // namespace

Result<StoreOptions> ReadStoreIdentity(FileSystem* fs, const std::string& dir) {
  if (fs == nullptr) fs = FileSystem::Default();
  const std::string path = dir + "/" + kStoreFile;
  auto text = ReadFileToString(fs, path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return Status::NotFound(dir + " is not a tierkv cache directory (no " + kStoreFile +
                              " identity file)");
    }
    return text.status();
  }
  const std::string& t = *text;
  if (t.compare(0, std::strlen(kStoreMagic), kStoreMagic) != 0) {
    return Status::InvalidArgument(path + ": not a tierkv store identity file");
  }
  StoreOptions o;
  o.dir = dir;
  o.fs = fs;
  auto number = [&](const char* key, uint64_t max) -> Result<uint64_t> {
    const std::string v = ValueOf(t, key);
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n > max) {
      return Status::InvalidArgument(path + ": bad or missing field '" + key + "'");
    }
    return static_cast<uint64_t>(n);
  };
  const std::string fp = ValueOf(t, "fingerprint");
  char* end = nullptr;
  o.fingerprint = std::strtoull(fp.c_str(), &end, 16);
  if (fp.size() != 16 || *end != '\0') {
    return Status::InvalidArgument(path + ": bad or missing field 'fingerprint'");
  }
  ASSIGN_OR_RETURN(uint64_t chunk, number("chunk_tokens", 4096));
  ASSIGN_OR_RETURN(uint64_t layers, number("layers", 65535));
  ASSIGN_OR_RETURN(uint64_t row, number("row_bytes", UINT32_MAX));
  o.chunk_tokens = static_cast<uint32_t>(chunk);
  o.layers = static_cast<uint16_t>(layers);
  o.row_bytes = static_cast<uint32_t>(row);
  const std::string dtype = ValueOf(t, "dtype");
  if (dtype == "f16") {
    o.dtype = KvDtype::kF16;
  } else if (dtype == "f32") {
    o.dtype = KvDtype::kF32;
  } else {
    return Status::InvalidArgument(path + ": bad or missing field 'dtype'");
  }
  if (!ValueOf(t, "probe_bytes").empty()) {
    ASSIGN_OR_RETURN(uint64_t probe, number("probe_bytes", o.row_bytes));
    o.probe_bytes = static_cast<uint32_t>(probe);
  }
  o.model_description = ValueOf(t, "model");
  return o;
}

namespace {

std::string ValueOf(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size() + 1, key + " ") == 0) return line.substr(key.size() + 1);
  }
  return "";
}

}  // namespace

std::string SegmentFileName(uint32_t segment) {
  char name[32];
  std::snprintf(name, sizeof name, "seg-%06u.tkv", segment);
  return name;
}

std::string SegmentPath(const std::string& dir, uint32_t segment) {
  return dir + "/" + SegmentFileName(segment);
}

Result<std::vector<uint32_t>> ListSegments(FileSystem* fs, const std::string& dir) {
  ASSIGN_OR_RETURN(auto names, fs->ListDir(dir));
  std::vector<uint32_t> out;
  for (const auto& n : names) {
    if (uint32_t seg = SegmentNumber(n)) out.push_back(seg);
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// A file the store did not write (nor its owner) means the directory is not
// the store's: refused, before anything is written into it.
Status CheckForeignFiles(const StoreOptions& o, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    if (name == kStoreFile || SegmentNumber(name) != 0 || name == std::string(kStoreFile) + ".tmp" ||
        name == kManifestFile || name == std::string(kManifestFile) + ".tmp" || name == kLockFile ||
        name == kIoModelFile || name == std::string(kIoModelFile) + ".tmp" || name == kIoScratchFile ||
        IsOwnerFile(o, name)) {
      continue;
    }
    return Status::InvalidArgument("cache directory " + o.dir + " holds a file the store did not write: " +
                                   name + " (use an empty or tierkv-only directory)");
  }
  return Status::Ok();
}

// The directory holds prompts (every record header lists its token ids), so
// only its owner may read it: a directory others may enter (made by hand,
// or by an older tierkv, which created it 0755) is tightened to 0700, with a
// warning, because the files in it were readable; one another user owns is
// refused (InvalidArgument), since chmod would not end that user's access.
// Files the store creates are 0600 (FileSystem).
Status MakePrivate(const std::string& dir, FileSystem* fs) {
  Result<uint32_t> was = fs->MakeDirPrivate(dir);
  if (!was.ok()) return was.status().WithContext("cache directory " + dir);
  if ((*was & 077) != 0) {
    char mode[16];
    std::snprintf(mode, sizeof mode, "%04o", *was);
    TIERKV_LOG(kWarn) << "cache directory " << dir << " was open to other users (mode " << mode
                      << "); made private to its owner (0700): it holds prompts";
  }
  return Status::Ok();
}

// One writer per directory: two would fight over budgets and manifests.
// (Read-only opens, as `inspect`, take no lock.)
Status TakeLock(const StoreOptions& o, FileSystem* fs, std::unique_ptr<FileLock>* lock) {
  auto taken = fs->LockFile(o.dir + "/" + kLockFile);
  if (taken.ok()) {
    *lock = std::move(taken).value();
    return Status::Ok();
  }
  if (taken.status().code() == StatusCode::kUnavailable) {
    return Status::Unavailable("cache directory " + o.dir +
                               " is in use by another tierkv store (its LOCK is held); use "
                               "another directory or stop the other process");
  }
  return taken.status().WithContext("cache directory " + o.dir);
}

// The identity file's text against this store's identity.
Status CheckIdentity(const StoreOptions& o, const std::string& text) {
  const std::string path = o.dir + "/" + kStoreFile;
  if (text.compare(0, std::strlen(kStoreMagic), kStoreMagic) != 0) {
    return Status::InvalidArgument(path + ": not a tierkv store identity file");
  }
  if (ValueOf(text, "fingerprint") != Hex64(o.fingerprint)) {
    // chunk_tokens is part of the fingerprint: name it when it is what differs.
    const std::string tokens = ValueOf(text, "chunk_tokens");
    if (tokens != std::to_string(o.chunk_tokens)) {
      return Status::InvalidArgument("cache directory " + o.dir + " was written with chunks of " + tokens +
                                     " tokens, not " + std::to_string(o.chunk_tokens) +
                                     " (--chunk-tokens), or for another model; use another cache directory");
    }
    return Status::InvalidArgument("cache directory " + o.dir + " belongs to another model (fingerprint " +
                                   ValueOf(text, "fingerprint") + ", this model " + Hex64(o.fingerprint) +
                                   "); use another cache directory");
  }
  if (IdentityPart(text) != StoreIdentity(o)) {
    return Status::InvalidArgument("cache directory " + o.dir + " was written with another geometry (" +
                                   path + " says chunk_tokens " + ValueOf(text, "chunk_tokens") +
                                   ", layers " + ValueOf(text, "layers") + ", row_bytes " +
                                   ValueOf(text, "row_bytes") + ", dtype " + ValueOf(text, "dtype") + ")");
  }
  return Status::Ok();
}

}  // namespace

Status PrepareCacheDir(const StoreOptions& o, FileSystem* fs, std::unique_ptr<FileLock>* lock) {
  if (o.read_only && !fs->FileExists(o.dir)) {
    return Status::NotFound("cache directory " + o.dir + " does not exist");
  }
  if (!o.read_only) {
    RETURN_IF_ERROR(fs->CreateDir(o.dir).WithContext("cache directory " + o.dir));
    RETURN_IF_ERROR(MakePrivate(o.dir, fs));
  }
  ASSIGN_OR_RETURN(auto names, fs->ListDir(o.dir));
  RETURN_IF_ERROR(CheckForeignFiles(o, names));
  if (!o.read_only) RETURN_IF_ERROR(TakeLock(o, fs, lock));
  const std::string identity_path = o.dir + "/" + kStoreFile;
  if (std::find(names.begin(), names.end(), kStoreFile) != names.end()) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(fs, identity_path));
    return CheckIdentity(o, text);
  }
  if (std::any_of(names.begin(), names.end(), [](const std::string& n) { return SegmentNumber(n) != 0; })) {
    return Status::InvalidArgument("cache directory " + o.dir + " holds segments but no STORE identity file");
  }
  if (o.read_only) {
    return Status::NotFound(o.dir + " is not a tierkv cache directory (no STORE identity file)");
  }
  return WriteFileAtomically(fs, identity_path, StoreIdentityFile(o));
}

}  // namespace tierkv::store

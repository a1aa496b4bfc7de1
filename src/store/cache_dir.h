// A cache directory's own files: the STORE identity (format version, model
// fingerprint, geometry), the LOCK of its one writer, the MANIFEST's name,
// and the names of segment files. Everything else in the directory is
// foreign, except the owner's files (StoreOptions::owner_files).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "store/chunk_store.h"
#include "tierkv/filesystem.h"
#include "tierkv/status.h"

namespace tierkv::store {

inline constexpr const char* kStoreFile = "STORE";
inline constexpr const char* kManifestFile = "MANIFEST";
inline constexpr const char* kLockFile = "LOCK";

// seg-000123.tkv -> 123; 0 if the name is not a segment's.
uint32_t SegmentNumber(const std::string& name);
// seg-000123.tkv for 123, and its path in `dir`.
std::string SegmentFileName(uint32_t segment);
std::string SegmentPath(const std::string& dir, uint32_t segment);
// The segment numbers in `dir`, ascending.
Result<std::vector<uint32_t>> ListSegments(FileSystem* fs, const std::string& dir);

// Makes `o.dir` a cache directory of this store or checks that it is one:
// creates it and takes its LOCK (unless read-only; *lock then holds it),
// refuses foreign files, and writes or checks the identity. InvalidArgument
// names the mismatch (another model, another geometry, foreign file);
// Unavailable: another process holds the LOCK.
Status PrepareCacheDir(const StoreOptions& o, FileSystem* fs, std::unique_ptr<FileLock>* lock);

}  // namespace tierkv::store

// All OS file access goes through FileSystem, so tests can substitute an
// in-memory or fault-injecting one (see src/util/fault_injection_fs.h).
//
// Thread safety: FileSystem methods are thread-safe. A RandomAccessFile may be
// read concurrently; a WritableFile is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tierkv/status.h"

namespace tierkv {

struct FileOptions {
  // Open with O_DIRECT: offsets, sizes and buffers must be 4 KiB aligned.
  bool direct_io = false;
  // Refuse a path whose last component is a symbolic link (InvalidArgument),
  // so that a cache directory cannot be redirected to another file.
  bool no_follow = false;
};

class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to n bytes at offset into buf and returns how many were read.
  // Fewer than n means end of file or a short read: callers loop (ReadFull).
  virtual Result<size_t> Read(uint64_t offset, size_t n, char* buf) const = 0;
  virtual Result<uint64_t> Size() const = 0;
  // The OS descriptor for asynchronous I/O (io_uring), or -1 when the file is
  // not an OS file (in-memory, fault-injecting): callers then use Read().
  virtual int native_handle() const { return -1; }
};

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Appends data. On failure the file may hold a prefix of data.
  virtual Status Append(std::string_view data) = 0;
  // Makes everything appended so far durable.
  virtual Status Sync() = 0;
  virtual Status Close() = 0;
  virtual uint64_t Size() const = 0;
};

// An advisory lock held until destruction.
class FileLock {
 public:
  virtual ~FileLock() = default;
  // OK while the path the lock was taken at still names the locked file.
  // IOError once it does not (the file deleted, or its directory removed,
  // moved or replaced): the lock then keeps no one out of that path, since
  // another process locks the new file there. Cheap (two stat calls); files
  // that are not OS files are always in place.
  virtual Status CheckInPlace() const { return Status::Ok(); }
};

// Files and directories the file systems create are private to the
// process's user: the POSIX one creates files 0600 and directories 0700
// whatever the umask (STYLE 30; a cache directory holds prompts).
class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // The process-wide POSIX file system. Never null; not owned by the caller.
  static FileSystem* Default();

  virtual Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const FileOptions& options = {}) = 0;
  // Creates the file, or truncates it if `truncate`, else appends to it.
  virtual Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                                bool truncate = true) = 0;
  // OK if the directory already exists (its mode is left as it is).
  virtual Status CreateDir(const std::string& path) = 0;
  // Makes an existing directory private to its owner: removes every
  // permission of group and others (chmod go-rwx). Returns the permission
  // bits it had before (so that the caller can say it tightened them).
  // InvalidArgument when another user owns it (chmod would hide, not end,
  // that user's access). A symbolic link is followed. File systems without
  // owners (in memory) return 0700 and change nothing.
  virtual Result<uint32_t> MakeDirPrivate(const std::string& path) {
    (void)path;
    return uint32_t{0700};
  }
  virtual Status DeleteFile(const std::string& path) = 0;
  // Atomically replaces `to`, as rename(2).
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // Makes creations, deletions and renames in the directory durable.
  virtual Status SyncDir(const std::string& path) = 0;
  virtual Status Truncate(const std::string& path, uint64_t size) = 0;
  // Names (not paths) of the entries of a directory, without "." and "..".
  virtual Result<std::vector<std::string>> ListDir(const std::string& path) = 0;
  virtual Result<uint64_t> FileSize(const std::string& path) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  // Creates `path` if missing and locks it exclusively (flock). Unavailable
  // if anyone else, this process included, holds it. Not a mutating call for
  // fault injection: it writes no data.
  virtual Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) = 0;
};

// A file system held in memory; unsynced data is kept (see the fault-injecting
// wrapper for crash simulation).
std::unique_ptr<FileSystem> NewMemFileSystem();

// Reads until n bytes or end of file; returns the count read.
Result<size_t> ReadFull(const RandomAccessFile& file, uint64_t offset, size_t n, char* buf);
Result<std::string> ReadFileToString(FileSystem* fs, const std::string& path);

// A whole file's bytes, read-only, for as long as the object lives.
class FileBytes {
 public:
  virtual ~FileBytes() = default;
  virtual std::string_view data() const = 0;
  // True for a memory mapping (pages read on first touch, shared with the
  // page cache), false for a copy in memory.
  virtual bool mapped() const = 0;
};
// Maps an OS file read-only (mmap): only the pages touched become resident,
// and they are the page cache's. The file must not be truncated while
// mapped (reading a vanished page raises SIGBUS, as for any mapping); model
// files are replaced by rename (WriteFileAtomically), which is safe. A file
// that is not an OS file (in-memory, fault-injecting) is read into memory.
Result<std::unique_ptr<FileBytes>> MapOrReadFile(FileSystem* fs, const std::string& path);
// Writes a file so that after a crash either the old or the new contents are
// there: temp file, sync, rename, sync directory.
Status WriteFileAtomically(FileSystem* fs, const std::string& path, std::string_view data);
// The directory part of a path ("." when there is none).
std::string DirName(const std::string& path);

}  // namespace tierkv

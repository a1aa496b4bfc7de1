#include "tierkv/filesystem.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

namespace tierkv {

Result<size_t> ReadFull(const RandomAccessFile& file, uint64_t offset, size_t n, char* buf) {
  size_t done = 0;
  while (done < n) {
    ASSIGN_OR_RETURN(size_t got, file.Read(offset + done, n - done, buf + done));
    if (got == 0) break;
    done += got;
  }
  return done;
}

Result<std::string> ReadFileToString(FileSystem* fs, const std::string& path) {
  ASSIGN_OR_RETURN(auto file, fs->NewRandomAccessFile(path));
  ASSIGN_OR_RETURN(uint64_t size, file->Size());
  std::string data(size, '\0');
  ASSIGN_OR_RETURN(size_t got, ReadFull(*file, 0, size, data.data()));
  if (got != size) {
    return Status::IOError(path + ": file shrank while reading (" + std::to_string(got) + " of " +
                           std::to_string(size) + " bytes)");
  }
  return data;
}

namespace {

class StringBytes final : public FileBytes {
 public:
  explicit StringBytes(std::string s) : s_(std::move(s)) {}
  std::string_view data() const override { return s_; }
  bool mapped() const override { return false; }

 private:
  std::string s_;
};

class MappedBytes final : public FileBytes {
 public:
  MappedBytes(void* base, size_t size) : base_(base), size_(size) {}
  ~MappedBytes() override { ::munmap(base_, size_); }
  std::string_view data() const override { return {static_cast<const char*>(base_), size_}; }
  bool mapped() const override { return true; }

 private:
  void* base_;
  size_t size_;
};

}  // namespace

Result<std::unique_ptr<FileBytes>> MapOrReadFile(FileSystem* fs, const std::string& path) {
  ASSIGN_OR_RETURN(auto file, fs->NewRandomAccessFile(path));
  ASSIGN_OR_RETURN(uint64_t size, file->Size());
  if (file->native_handle() >= 0 && size > 0) {
    // The mapping keeps the file's pages after the descriptor closes.
    void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file->native_handle(), 0);
    if (base == MAP_FAILED) return Status::IOError(path + ": mmap: " + std::strerror(errno));
    return std::unique_ptr<FileBytes>(new MappedBytes(base, size));
  }
  std::string data(size, '\0');
  ASSIGN_OR_RETURN(size_t got, ReadFull(*file, 0, size, data.data()));
  if (got != size) {
    return Status::IOError(path + ": file shrank while reading (" + std::to_string(got) + " of " +
                           std::to_string(size) + " bytes)");
  }
  return std::unique_ptr<FileBytes>(new StringBytes(std::move(data)));
}

std::string DirName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status WriteFileAtomically(FileSystem* fs, const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp";
  {
    ASSIGN_OR_RETURN(auto file, fs->NewWritableFile(tmp, /*truncate=*/true));
    Status s = file->Append(data);
    if (s.ok()) s = file->Sync();
    Status c = file->Close();
    if (s.ok()) s = c;
    if (!s.ok()) {
      fs->DeleteFile(tmp).IgnoreError();
      return s;
    }
  }
  if (Status s = fs->RenameFile(tmp, path); !s.ok()) {
    fs->DeleteFile(tmp).IgnoreError();  // never leave the temporary behind
    return s;
  }
  return fs->SyncDir(DirName(path));
}

}  // namespace tierkv

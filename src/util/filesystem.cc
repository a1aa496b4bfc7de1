#include "tierkv/filesystem.h"

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

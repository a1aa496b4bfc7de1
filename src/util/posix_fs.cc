// The real file system: POSIX calls, EINTR retried, descriptors closed on every path.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tierkv/filesystem.h"

namespace tierkv {
namespace {

// Private by default (STYLE 30): what a process writes holds its users' data
// (a cache directory's records list prompts' token ids). A umask can only
// take bits away, so these are the widest modes whatever it is.
constexpr mode_t kFileMode = 0600;
constexpr mode_t kDirMode = 0700;

Status PosixError(const std::string& context, int err) {
  std::string msg = context + ": " + std::strerror(err);
  if (err == ENOENT) return Status::NotFound(msg);
  if (err == ENOSPC || err == EDQUOT) return Status::ResourceExhausted(msg);
  if (err == EINVAL || err == EISDIR || err == ENOTDIR || err == ENAMETOOLONG) {
    return Status::InvalidArgument(msg);
  }
  return Status::IOError(msg);
}

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  Result<size_t> Read(uint64_t offset, size_t n, char* buf) const override {
    for (;;) {
      ssize_t r = ::pread(fd_, buf, n, static_cast<off_t>(offset));
      if (r >= 0) return static_cast<size_t>(r);
      if (errno == EINTR) continue;
      return PosixError(path_ + " (read at " + std::to_string(offset) + ")", errno);
    }
  }

  Result<uint64_t> Size() const override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return PosixError(path_, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  int native_handle() const override { return fd_; }

 private:
  std::string path_;
  int fd_;
};

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Append(std::string_view data) override {
    if (fd_ < 0) return Status::InvalidArgument(path_ + ": append after close");
    while (!data.empty()) {
      ssize_t w = ::write(fd_, data.data(), data.size());
      if (w < 0) {
        if (errno == EINTR) continue;
        return PosixError(path_ + " (write)", errno);
      }
      data.remove_prefix(static_cast<size_t>(w));
      size_ += static_cast<uint64_t>(w);
    }
    return Status::Ok();
  }

  Status Sync() override {
    if (fd_ < 0) return Status::InvalidArgument(path_ + ": sync after close");
    if (::fdatasync(fd_) != 0) return PosixError(path_ + " (fdatasync)", errno);
    return Status::Ok();
  }

  Status Close() override {
    if (fd_ < 0) return Status::Ok();
    int r = ::close(fd_);
    fd_ = -1;
    if (r != 0) return PosixError(path_ + " (close)", errno);
    return Status::Ok();
  }

  uint64_t Size() const override { return size_; }

 private:
  std::string path_;
  int fd_;
  uint64_t size_;
};

class PosixFileLock final : public FileLock {
 public:
  PosixFileLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixFileLock() override {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }

  // Two system calls: the locked file (fstat of the descriptor) against
  // what the path names now (stat).
  Status CheckInPlace() const override {
    struct stat held, now;
    if (::fstat(fd_, &held) != 0) return PosixError(path_ + " (fstat)", errno);
    if (held.st_nlink == 0) return Status::IOError(path_ + " was deleted");
    if (::stat(path_.c_str(), &now) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return Status::IOError(path_ + " is gone (its directory moved)");
      return PosixError(path_ + " (stat)", errno);
    }
    if (now.st_dev != held.st_dev || now.st_ino != held.st_ino) {
      return Status::IOError(path_ + " now names another file (its directory was replaced)");
    }
    return Status::Ok();
  }

 private:
  std::string path_;
  int fd_;
};

class PosixFileSystem final : public FileSystem {
 public:
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, kFileMode);
    if (fd < 0) return PosixError(path, errno);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK) return Status::Unavailable(path + ": locked by another user");
      return PosixError(path, err);
    }
    return std::unique_ptr<FileLock>(new PosixFileLock(path, fd));
  }

  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const FileOptions& options) override {
    int flags = O_RDONLY | O_CLOEXEC;
    if (options.direct_io) flags |= O_DIRECT;
    if (options.no_follow) flags |= O_NOFOLLOW;
    int fd = ::open(path.c_str(), flags);
    if (fd < 0 && options.no_follow && errno == ELOOP) {
      return Status::InvalidArgument(path + ": is a symbolic link");
    }
    if (fd < 0 && options.direct_io && errno == EINVAL) {  // the file system refuses O_DIRECT
      return Status::InvalidArgument(path + ": the file system refuses O_DIRECT");
    }
    if (fd < 0) return PosixError(path, errno);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return PosixError(path, err);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return Status::InvalidArgument(path + ": not a regular file");
    }
    return std::unique_ptr<RandomAccessFile>(new PosixRandomAccessFile(path, fd));
  }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        bool truncate) override {
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : O_APPEND);
    int fd = ::open(path.c_str(), flags, kFileMode);
    if (fd < 0) return PosixError(path, errno);
    uint64_t size = 0;
    if (!truncate) {
      struct stat st;
      if (::fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        return PosixError(path, err);
      }
      size = static_cast<uint64_t>(st.st_size);
    }
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd, size));
  }

  Status CreateDir(const std::string& path) override {
    if (::mkdir(path.c_str(), kDirMode) == 0) return Status::Ok();
    if (errno == EEXIST) {
      struct stat st;
      if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return Status::Ok();
      return Status::InvalidArgument(path + ": exists and is not a directory");
    }
    return PosixError(path + " (mkdir)", errno);
  }

  Result<uint32_t> MakeDirPrivate(const std::string& path) override {
    // Through a descriptor, so that fchmod acts on the directory fstat saw (a
    // symbolic link is followed: its target is what the caller uses).
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PosixError(path + " (open dir)", errno);
    struct stat st;
    Status s;
    if (::fstat(fd, &st) != 0) {
      s = PosixError(path + " (fstat)", errno);
    } else if (st.st_uid != ::geteuid()) {
      s = Status::InvalidArgument(path + " is owned by another user (uid " + std::to_string(st.st_uid) +
                                  ", this process runs as " + std::to_string(::geteuid()) + ")");
    } else if ((st.st_mode & 077) != 0 && ::fchmod(fd, st.st_mode & ~mode_t{077} & 07777) != 0) {
      s = PosixError(path + " (chmod)", errno);
    }
    ::close(fd);
    if (!s.ok()) return s;
    return static_cast<uint32_t>(st.st_mode & 07777);
  }

  Status DeleteFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return PosixError(path + " (unlink)", errno);
    return Status::Ok();
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return PosixError("rename " + from + " -> " + to, errno);
    }
    return Status::Ok();
  }

  Status SyncDir(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PosixError(path + " (open dir)", errno);
    int r = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (r != 0) return PosixError(path + " (fsync dir)", err);
    return Status::Ok();
  }

  Status Truncate(const std::string& path, uint64_t size) override {
    if (::truncate(path.c_str(), static_cast<off_t>(size)) != 0) {
      return PosixError(path + " (truncate)", errno);
    }
    return Status::Ok();
  }

  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return PosixError(path + " (opendir)", errno);
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(dir)) {
      std::string_view n(e->d_name);
      if (n != "." && n != "..") names.emplace_back(n);
    }
    ::closedir(dir);
    return names;
  }

  Result<uint64_t> FileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return PosixError(path, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  bool FileExists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }
};

}  // namespace

FileSystem* FileSystem::Default() {
  static PosixFileSystem* fs = new PosixFileSystem();  // never destroyed: used at exit
  return fs;
}

}  // namespace tierkv

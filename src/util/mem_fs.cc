// An in-memory FileSystem for tests. Directories are implicit in paths except
// that CreateDir records them so ListDir and CreateDir-on-a-file behave.
#include <map>
#include <set>

#include "tierkv/filesystem.h"
#include "tierkv/mutex.h"

namespace tierkv {
namespace {

struct MemFile {
  Mutex mu;
  std::string data TIERKV_GUARDED_BY(mu);
};

class MemRandomAccessFile final : public RandomAccessFile {
 public:
  explicit MemRandomAccessFile(std::shared_ptr<MemFile> f) : f_(std::move(f)) {}
  Result<size_t> Read(uint64_t offset, size_t n, char* buf) const override {
    MutexLock l(&f_->mu);
    if (offset >= f_->data.size()) return size_t{0};
    size_t got = std::min<uint64_t>(n, f_->data.size() - offset);
    f_->data.copy(buf, got, offset);
    return got;
  }
  Result<uint64_t> Size() const override {
    MutexLock l(&f_->mu);
    return static_cast<uint64_t>(f_->data.size());
  }

 private:
  std::shared_ptr<MemFile> f_;
};

class MemWritableFile final : public WritableFile {
 public:
  explicit MemWritableFile(std::shared_ptr<MemFile> f) : f_(std::move(f)) {}
  Status Append(std::string_view data) override {
    MutexLock l(&f_->mu);
    f_->data.append(data);
    return Status::Ok();
  }
  Status Sync() override { return Status::Ok(); }
  Status Close() override { return Status::Ok(); }
  uint64_t Size() const override {
    MutexLock l(&f_->mu);
    return f_->data.size();
  }

 private:
  std::shared_ptr<MemFile> f_;
};

class MemFileSystem final : public FileSystem {
 public:
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    MutexLock l(&mu_);
    if (locked_.count(path)) return Status::Unavailable(path + ": locked by another user");
    if (!files_.count(path)) files_[path] = std::make_shared<MemFile>();
    locked_.insert(path);
    return std::unique_ptr<FileLock>(new MemLock(this, path));
  }

  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path,
                                                                const FileOptions&) override {
    MutexLock l(&mu_);
    auto it = files_.find(path);
    if (it == files_.end()) return Status::NotFound(path + ": no such file");
    return std::unique_ptr<RandomAccessFile>(new MemRandomAccessFile(it->second));
  }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        bool truncate) override {
    MutexLock l(&mu_);
    if (dirs_.count(path)) return Status::InvalidArgument(path + ": is a directory");
    auto& f = files_[path];
    if (!f) f = std::make_shared<MemFile>();
    if (truncate) {
      MutexLock fl(&f->mu);
      f->data.clear();
    }
    return std::unique_ptr<WritableFile>(new MemWritableFile(f));
  }

  Status CreateDir(const std::string& path) override {
    MutexLock l(&mu_);
    if (files_.count(path)) return Status::InvalidArgument(path + ": exists and is not a directory");
    dirs_.insert(path);
    return Status::Ok();
  }

  Status DeleteFile(const std::string& path) override {
    MutexLock l(&mu_);
    if (files_.erase(path) == 0) return Status::NotFound(path + ": no such file");
    return Status::Ok();
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    MutexLock l(&mu_);
    auto it = files_.find(from);
    if (it == files_.end()) return Status::NotFound(from + ": no such file");
    files_[to] = it->second;
    files_.erase(from);
    return Status::Ok();
  }

  Status SyncDir(const std::string&) override { return Status::Ok(); }

  Status Truncate(const std::string& path, uint64_t size) override {
    MutexLock l(&mu_);
    auto it = files_.find(path);
    if (it == files_.end()) return Status::NotFound(path + ": no such file");
    MutexLock fl(&it->second->mu);
    it->second->data.resize(size);
    return Status::Ok();
  }

  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    MutexLock l(&mu_);
    const std::string prefix = path + "/";
    std::set<std::string> names;
    auto collect = [&](const std::string& p) {
      if (p.compare(0, prefix.size(), prefix) != 0) return;
      std::string rest = p.substr(prefix.size());
      names.insert(rest.substr(0, rest.find('/')));
    };
    for (const auto& [p, f] : files_) collect(p);
    for (const auto& d : dirs_) collect(d);
    if (names.empty() && !dirs_.count(path)) return Status::NotFound(path + ": no such directory");
    return std::vector<std::string>(names.begin(), names.end());
  }

  Result<uint64_t> FileSize(const std::string& path) override {
    MutexLock l(&mu_);
    auto it = files_.find(path);
    if (it == files_.end()) return Status::NotFound(path + ": no such file");
    MutexLock fl(&it->second->mu);
    return static_cast<uint64_t>(it->second->data.size());
  }

  bool FileExists(const std::string& path) override {
    MutexLock l(&mu_);
    return files_.count(path) > 0 || dirs_.count(path) > 0;
  }

 private:
  class MemLock final : public FileLock {
   public:
    MemLock(MemFileSystem* fs, std::string path) : fs_(fs), path_(std::move(path)) {}
    ~MemLock() override {
      MutexLock l(&fs_->mu_);
      fs_->locked_.erase(path_);
    }

   private:
    MemFileSystem* fs_;
    std::string path_;
  };

  Mutex mu_;  // the name space; each file's bytes have their own lock
  std::map<std::string, std::shared_ptr<MemFile>> files_ TIERKV_GUARDED_BY(mu_);
  std::set<std::string> locked_ TIERKV_GUARDED_BY(mu_);
  std::set<std::string> dirs_ TIERKV_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<FileSystem> NewMemFileSystem() { return std::make_unique<MemFileSystem>(); }

}  // namespace tierkv

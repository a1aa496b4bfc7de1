#include "util/fault_injection_fs.h"

namespace tierkv {
namespace {

class FaultRandomAccessFile final : public RandomAccessFile {
 public:
  FaultRandomAccessFile(FaultInjectionFileSystem* fs, std::string path,
                        std::unique_ptr<RandomAccessFile> base)
      : fs_(fs), path_(std::move(path)), base_(std::move(base)) {}

  Result<size_t> Read(uint64_t offset, size_t n, char* buf) const override {
    bool short_io = false;
    RETURN_IF_ERROR(fs_->MaybeFail(FaultInjectionFileSystem::Op::kRead, path_, &short_io));
    if (short_io && n > 1) n = n / 2;
    return base_->Read(offset, n, buf);
  }
  Result<uint64_t> Size() const override { return base_->Size(); }

 private:
  FaultInjectionFileSystem* fs_;
  std::string path_;
  std::unique_ptr<RandomAccessFile> base_;
};

class FaultWritableFile final : public WritableFile {
 public:
  FaultWritableFile(FaultInjectionFileSystem* fs, std::string path,
                    std::unique_ptr<WritableFile> base)
      : fs_(fs), path_(std::move(path)), base_(std::move(base)) {}

  Status Append(std::string_view data) override {
    bool short_io = false;
    Status crash = fs_->Mutation(path_, &short_io);
    if (!crash.ok()) {
      if (short_io && data.size() > 1) {
        base_->Append(data.substr(0, data.size() / 2)).IgnoreError();
        fs_->OnAppend(path_, base_->Size());
      }
      return crash;
    }
    Status s = fs_->MaybeFail(FaultInjectionFileSystem::Op::kWrite, path_, &short_io);
    if (!s.ok()) {
      // A failed write may still have written a prefix, as a real device can.
      if (short_io && data.size() > 1) {
        base_->Append(data.substr(0, data.size() / 2)).IgnoreError();
        fs_->OnAppend(path_, base_->Size());
      }
      return s;
    }
    RETURN_IF_ERROR(base_->Append(data));
    fs_->OnAppend(path_, base_->Size());
    return Status::Ok();
  }
  Status Sync() override {
    bool short_io = false;
    RETURN_IF_ERROR(fs_->Mutation(path_, &short_io));
    RETURN_IF_ERROR(fs_->MaybeFail(FaultInjectionFileSystem::Op::kSync, path_, &short_io));
    RETURN_IF_ERROR(base_->Sync());
    fs_->OnSync(path_, base_->Size());
    return Status::Ok();
  }
  Status Close() override { return base_->Close(); }
  uint64_t Size() const override { return base_->Size(); }

 private:
  FaultInjectionFileSystem* fs_;
  std::string path_;
  std::unique_ptr<WritableFile> base_;
};

}  // namespace

FaultInjectionFileSystem::FaultInjectionFileSystem(FileSystem* base, FaultOptions options)
    : base_(base), options_(options), rng_(options.seed) {}

void FaultInjectionFileSystem::SetOptions(const FaultOptions& options) {
  MutexLock l(&mu_);
  options_ = options;
  rng_.seed(options.seed);
}

void FaultInjectionFileSystem::SetActive(bool active) {
  MutexLock l(&mu_);
  active_ = active;
}

uint64_t FaultInjectionFileSystem::injected_faults() const {
  MutexLock l(&mu_);
  return injected_;
}

Status FaultInjectionFileSystem::CheckActive(const std::string& what) const {
  MutexLock l(&mu_);
  if (!active_) return Status::IOError(what + ": file system inactive (simulated crash)");
  return Status::Ok();
}

void FaultInjectionFileSystem::CrashAfter(uint64_t mutating_calls) {
  MutexLock l(&mu_);
  crash_countdown_ = mutating_calls;
}

uint64_t FaultInjectionFileSystem::mutating_calls() const {
  MutexLock l(&mu_);
  return mutations_;
}

Status FaultInjectionFileSystem::Mutation(const std::string& path, bool* torn) {
  MutexLock l(&mu_);
  if (!active_) return Status::IOError(path + ": file system inactive (simulated crash)");
  ++mutations_;
  if (crash_countdown_ > 0 && --crash_countdown_ == 0) {
    active_ = false;
    *torn = true;
    return Status::IOError(path + ": simulated crash");
  }
  return Status::Ok();
}

Status FaultInjectionFileSystem::MaybeFail(Op op, const std::string& path, bool* short_io) {
  MutexLock l(&mu_);
  if (!active_) return Status::IOError(path + ": file system inactive (simulated crash)");
  if (options_.one_in == 0) return Status::Ok();
  std::vector<int> kinds;  // 0 eio, 1 enospc, 2 short
  switch (op) {
    case Op::kRead:
      if (options_.read_eio) kinds.push_back(0);
      if (options_.read_short) kinds.push_back(2);
      break;
    case Op::kWrite:
      if (options_.write_eio) kinds.push_back(0);
      if (options_.write_enospc) kinds.push_back(1);
      break;
    case Op::kSync:
      if (options_.sync_eio) kinds.push_back(0);
      break;
  }
  if (kinds.empty() || rng_() % options_.one_in != 0) return Status::Ok();
  ++injected_;
  const int kind = kinds[rng_() % kinds.size()];
  if (kind == 2) {
    *short_io = true;
    return Status::Ok();
  }
  *short_io = (op == Op::kWrite);
  if (kind == 1) return Status::ResourceExhausted(path + ": injected ENOSPC");
  return Status::IOError(path + ": injected EIO");
}

void FaultInjectionFileSystem::OnAppend(const std::string& path, uint64_t) {
  MutexLock l(&mu_);
  synced_size_.try_emplace(path, 0);
}

void FaultInjectionFileSystem::OnSync(const std::string& path, uint64_t size) {
  MutexLock l(&mu_);
  synced_size_[path] = size;
}

Status FaultInjectionFileSystem::DropUnsyncedData() {
  std::map<std::string, uint64_t> synced;
  std::set<std::string> created;
  {
    MutexLock l(&mu_);
    synced.swap(synced_size_);
    created.swap(created_unsynced_);
  }
  for (const auto& path : created) {
    if (base_->FileExists(path)) RETURN_IF_ERROR(base_->DeleteFile(path));
    synced.erase(path);
  }
  for (const auto& [path, size] : synced) {
    if (!base_->FileExists(path)) continue;
    ASSIGN_OR_RETURN(uint64_t cur, base_->FileSize(path));
    if (cur > size) RETURN_IF_ERROR(base_->Truncate(path, size));
  }
  return Status::Ok();
}

Result<std::unique_ptr<RandomAccessFile>> FaultInjectionFileSystem::NewRandomAccessFile(
    const std::string& path, const FileOptions& options) {
  RETURN_IF_ERROR(CheckActive(path));
  ASSIGN_OR_RETURN(auto base, base_->NewRandomAccessFile(path, options));
  return std::unique_ptr<RandomAccessFile>(new FaultRandomAccessFile(this, path, std::move(base)));
}

Result<std::unique_ptr<WritableFile>> FaultInjectionFileSystem::NewWritableFile(
    const std::string& path, bool truncate) {
  bool torn = false;
  RETURN_IF_ERROR(Mutation(path, &torn));
  const bool existed = base_->FileExists(path);
  ASSIGN_OR_RETURN(auto base, base_->NewWritableFile(path, truncate));
  {
    MutexLock l(&mu_);
    if (!existed) created_unsynced_.insert(path);
    if (truncate || !existed) {
      synced_size_[path] = 0;
    } else {
      synced_size_.try_emplace(path, base->Size());
    }
  }
  return std::unique_ptr<WritableFile>(new FaultWritableFile(this, path, std::move(base)));
}

Status FaultInjectionFileSystem::CreateDir(const std::string& path) {
  bool torn = false;
  RETURN_IF_ERROR(Mutation(path, &torn));
  return base_->CreateDir(path);
}

Status FaultInjectionFileSystem::DeleteFile(const std::string& path) {
  bool torn = false;
  RETURN_IF_ERROR(Mutation(path, &torn));
  RETURN_IF_ERROR(base_->DeleteFile(path));
  MutexLock l(&mu_);
  synced_size_.erase(path);
  created_unsynced_.erase(path);
  return Status::Ok();
}

Status FaultInjectionFileSystem::RenameFile(const std::string& from, const std::string& to) {
  bool torn = false;
  RETURN_IF_ERROR(Mutation(from, &torn));
  RETURN_IF_ERROR(base_->RenameFile(from, to));
  MutexLock l(&mu_);
  auto it = synced_size_.find(from);
  if (it != synced_size_.end()) {
    synced_size_[to] = it->second;
    synced_size_.erase(it);
  }
  // Until the directory is synced the new name is not durable.
  created_unsynced_.erase(from);
  created_unsynced_.insert(to);
  return Status::Ok();
}

Status FaultInjectionFileSystem::SyncDir(const std::string& path) {
  bool torn = false;
  RETURN_IF_ERROR(Mutation(path, &torn));
  RETURN_IF_ERROR(base_->SyncDir(path));
  MutexLock l(&mu_);
  for (auto it = created_unsynced_.begin(); it != created_unsynced_.end();) {
    if (DirName(*it) == path) {
      it = created_unsynced_.erase(it);
    } else {
      ++it;
    }
  }
  return Status::Ok();
}

Status FaultInjectionFileSystem::Truncate(const std::string& path, uint64_t size) {
  bool torn = false;
  RETURN_IF_ERROR(Mutation(path, &torn));
  return base_->Truncate(path, size);
}

Result<std::vector<std::string>> FaultInjectionFileSystem::ListDir(const std::string& path) {
  RETURN_IF_ERROR(CheckActive(path));
  return base_->ListDir(path);
}

Result<uint64_t> FaultInjectionFileSystem::FileSize(const std::string& path) {
  RETURN_IF_ERROR(CheckActive(path));
  return base_->FileSize(path);
}

bool FaultInjectionFileSystem::FileExists(const std::string& path) {
  return base_->FileExists(path);
}

}  // namespace tierkv

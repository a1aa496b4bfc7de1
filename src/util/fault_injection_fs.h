// A FileSystem wrapper that simulates crashes and failing devices, for tests.
//
// Crash model: data appended but not synced, and files created since their
// directory was last synced, are lost by DropUnsyncedData() (as after power
// loss). Failures: EIO on read/write/sync, ENOSPC on write, and short reads,
// each at a rate of 1 in N with a seeded generator, so runs are repeatable.
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "tierkv/filesystem.h"
#include "tierkv/mutex.h"

namespace tierkv {

struct FaultOptions {
  // 0 disables random faults; otherwise each eligible call fails with
  // probability 1/one_in.
  uint32_t one_in = 0;
  bool read_eio = false;
  bool read_short = false;
  bool write_eio = false;
  bool write_enospc = false;
  bool sync_eio = false;
  uint64_t seed = 1;
};

class FaultInjectionFileSystem final : public FileSystem {
 public:
  // `base` must outlive this object.
  explicit FaultInjectionFileSystem(FileSystem* base, FaultOptions options = {});

  void SetOptions(const FaultOptions& options);
  // While inactive, every call fails with IOError ("file system inactive"):
  // the moment of a simulated crash.
  void SetActive(bool active);
  // Simulates a crash at the n-th mutating call from now (1 = the next one):
  // that call fails (an append leaves half its data, as a torn write) and the
  // file system turns inactive. Mutating calls: append, sync, file creation,
  // CreateDir, DeleteFile, RenameFile, SyncDir, Truncate. 0 cancels.
  void CrashAfter(uint64_t mutating_calls);
  // Mutating calls seen so far (to enumerate crash points of a protocol).
  uint64_t mutating_calls() const;
  // Loses what a power cut would: unsynced appends and unsynced creations.
  Status DropUnsyncedData();
  // Counts of injected faults so far.
  uint64_t injected_faults() const;

  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const FileOptions& options = {}) override;
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        bool truncate = true) override;
  Status CreateDir(const std::string& path) override;
  // Not a mutation for fault injection, as LockFile: it writes no data.
  Result<uint32_t> MakeDirPrivate(const std::string& path) override { return base_->MakeDirPrivate(path); }
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    return base_->LockFile(path);
  }
  Status DeleteFile(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string& path) override;
  Status Truncate(const std::string& path, uint64_t size) override;
  Result<std::vector<std::string>> ListDir(const std::string& path) override;
  Result<uint64_t> FileSize(const std::string& path) override;
  bool FileExists(const std::string& path) override;

  // Called by the wrapped files.
  enum class Op { kRead, kWrite, kSync };
  Status MaybeFail(Op op, const std::string& path, bool* short_io);
  // Counts a mutating call; fails it when the crash countdown reaches it.
  Status Mutation(const std::string& path, bool* torn);
  void OnAppend(const std::string& path, uint64_t new_size);
  void OnSync(const std::string& path, uint64_t size);

 private:
  Status CheckActive(const std::string& what) const TIERKV_EXCLUDES(mu_);

  FileSystem* base_;
  mutable Mutex mu_;  // every field below
  FaultOptions options_ TIERKV_GUARDED_BY(mu_);
  std::mt19937_64 rng_ TIERKV_GUARDED_BY(mu_);
  bool active_ TIERKV_GUARDED_BY(mu_) = true;
  uint64_t injected_ TIERKV_GUARDED_BY(mu_) = 0;
  uint64_t crash_countdown_ TIERKV_GUARDED_BY(mu_) = 0;
  uint64_t mutations_ TIERKV_GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> synced_size_ TIERKV_GUARDED_BY(mu_);  // files written through us
  std::set<std::string> created_unsynced_ TIERKV_GUARDED_BY(mu_);  // created since their dir's last sync
};

}  // namespace tierkv

#include "tierkv/filesystem.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>

#include "testing/shared.h"
#include "testing/status_matchers.h"
#include "util/fault_injection_fs.h"

namespace tierkv {
namespace {

using testing::IsOk;
using testing::StatusIs;

// The same behaviour is required of every implementation.
class FileSystemContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "posix") {
      fs_ = FileSystem::Default();
      dir_ = testing::MakeTempDir("fs");
      ASSERT_FALSE(dir_.empty());
    } else {
      owned_ = NewMemFileSystem();
      fs_ = owned_.get();
      dir_ = "/mem";
      ASSERT_THAT(fs_->CreateDir(dir_), IsOk());
    }
  }
  FileSystem* fs_ = nullptr;
  std::unique_ptr<FileSystem> owned_;
  std::string dir_;
};

TEST_P(FileSystemContract, WriteReadRenameDelete) {
  const std::string p = dir_ + "/a";
  ASSERT_OK_AND_ASSIGN(auto w, fs_->NewWritableFile(p));
  ASSERT_THAT(w->Append("hello "), IsOk());
  ASSERT_THAT(w->Append("world"), IsOk());
  EXPECT_EQ(w->Size(), 11u);
  ASSERT_THAT(w->Sync(), IsOk());
  ASSERT_THAT(w->Close(), IsOk());
  ASSERT_OK_AND_ASSIGN(std::string s, ReadFileToString(fs_, p));
  EXPECT_EQ(s, "hello world");

  ASSERT_OK_AND_ASSIGN(auto r, fs_->NewRandomAccessFile(p));
  char buf[16];
  ASSERT_OK_AND_ASSIGN(size_t got, r->Read(6, 16, buf));
  EXPECT_EQ(std::string(buf, got), "world");
  ASSERT_OK_AND_ASSIGN(got, r->Read(100, 4, buf));
  EXPECT_EQ(got, 0u);

  ASSERT_THAT(fs_->RenameFile(p, dir_ + "/b"), IsOk());
  EXPECT_FALSE(fs_->FileExists(p));
  ASSERT_OK_AND_ASSIGN(auto names, fs_->ListDir(dir_));
  EXPECT_EQ(names, std::vector<std::string>{"b"});
  ASSERT_THAT(fs_->Truncate(dir_ + "/b", 5), IsOk());
  ASSERT_OK_AND_ASSIGN(uint64_t size, fs_->FileSize(dir_ + "/b"));
  EXPECT_EQ(size, 5u);
  ASSERT_THAT(fs_->DeleteFile(dir_ + "/b"), IsOk());
  EXPECT_THAT(fs_->NewRandomAccessFile(dir_ + "/b"), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(fs_->DeleteFile(dir_ + "/b"), StatusIs(StatusCode::kNotFound));
}

TEST_P(FileSystemContract, AppendModeKeepsContents) {
  const std::string p = dir_ + "/log";
  {
    ASSERT_OK_AND_ASSIGN(auto w, fs_->NewWritableFile(p));
    ASSERT_THAT(w->Append("one"), IsOk());
  }
  ASSERT_OK_AND_ASSIGN(auto w, fs_->NewWritableFile(p, /*truncate=*/false));
  EXPECT_EQ(w->Size(), 3u);
  ASSERT_THAT(w->Append("two"), IsOk());
  ASSERT_THAT(w->Close(), IsOk());
  ASSERT_OK_AND_ASSIGN(std::string s, ReadFileToString(fs_, p));
  EXPECT_EQ(s, "onetwo");
}

TEST_P(FileSystemContract, AtomicWriteReplaces) {
  const std::string p = dir_ + "/MANIFEST";
  ASSERT_THAT(WriteFileAtomically(fs_, p, "v1"), IsOk());
  ASSERT_THAT(WriteFileAtomically(fs_, p, "version 2"), IsOk());
  ASSERT_OK_AND_ASSIGN(std::string s, ReadFileToString(fs_, p));
  EXPECT_EQ(s, "version 2");
  EXPECT_FALSE(fs_->FileExists(p + ".tmp"));
}

// A model file's bytes: mapped from an OS file, read from any other; the
// same bytes either way, for as long as the object lives.
TEST_P(FileSystemContract, MapOrReadFileGivesTheFilesBytes) {
  const std::string p = dir_ + "/model";
  std::string data(10000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 13 + 1);
  ASSERT_THAT(WriteFileAtomically(fs_, p, data), IsOk());
  ASSERT_OK_AND_ASSIGN(auto bytes, MapOrReadFile(fs_, p));
  EXPECT_EQ(bytes->mapped(), GetParam() == "posix");
  EXPECT_EQ(bytes->data(), data);
  ASSERT_THAT(WriteFileAtomically(fs_, dir_ + "/empty", ""), IsOk());
  ASSERT_OK_AND_ASSIGN(auto empty, MapOrReadFile(fs_, dir_ + "/empty"));
  EXPECT_TRUE(empty->data().empty());
  EXPECT_THAT(MapOrReadFile(fs_, dir_ + "/missing"), StatusIs(StatusCode::kNotFound, "missing"));
  // A replaced file (rename, as model files are written) leaves the mapping's bytes as they were.
  ASSERT_THAT(WriteFileAtomically(fs_, p, "other"), IsOk());
  EXPECT_EQ(bytes->data(), data);
}

INSTANTIATE_TEST_SUITE_P(All, FileSystemContract, ::testing::Values("posix", "mem"));

TEST(PosixFileSystemTest, DirectIoReadsAlignedBlocks) {
  FileSystem* fs = FileSystem::Default();
  const std::string dir = testing::MakeTempDir("odirect");
  const std::string p = dir + "/seg";
  std::string data(8192, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  {
    ASSERT_OK_AND_ASSIGN(auto w, fs->NewWritableFile(p));
    ASSERT_THAT(w->Append(data), IsOk());
    ASSERT_THAT(w->Sync(), IsOk());
  }
  FileOptions o;
  o.direct_io = true;
  auto r = fs->NewRandomAccessFile(p, o);
  if (!r.ok() && r.status().IsInvalidArgument()) GTEST_SKIP() << "file system without O_DIRECT";
  ASSERT_THAT(r, IsOk());
  void* buf = nullptr;
  ASSERT_EQ(posix_memalign(&buf, 4096, 4096), 0);
  ASSERT_OK_AND_ASSIGN(size_t got, (*r)->Read(4096, 4096, static_cast<char*>(buf)));
  EXPECT_EQ(got, 4096u);
  EXPECT_EQ(std::string(static_cast<char*>(buf), 4096), data.substr(4096));
  // Misaligned offsets are rejected by the kernel under O_DIRECT, not silently served.
  EXPECT_FALSE((*r)->Read(100, 4096, static_cast<char*>(buf)).ok());
  free(buf);
}

TEST(PosixFileSystemTest, ErrorsNameThePath) {
  FileSystem* fs = FileSystem::Default();
  auto r = fs->NewRandomAccessFile("/nonexistent/tierkv/file");
  EXPECT_THAT(r, StatusIs(StatusCode::kNotFound, "/nonexistent/tierkv/file"));
  const std::string dir = testing::MakeTempDir("dir");
  EXPECT_THAT(fs->NewRandomAccessFile(dir), StatusIs(StatusCode::kInvalidArgument));
}

TEST(FaultInjectionTest, DropUnsyncedDataLosesOnlyTheUnsyncedTail) {
  auto mem = NewMemFileSystem();
  FaultInjectionFileSystem fs(mem.get());
  ASSERT_THAT(fs.CreateDir("/d"), IsOk());
  ASSERT_OK_AND_ASSIGN(auto w, fs.NewWritableFile("/d/seg"));
  ASSERT_THAT(w->Append("durable"), IsOk());
  ASSERT_THAT(w->Sync(), IsOk());
  ASSERT_THAT(fs.SyncDir("/d"), IsOk());
  ASSERT_THAT(w->Append("-lost"), IsOk());
  ASSERT_OK_AND_ASSIGN(auto w2, fs.NewWritableFile("/d/new"));
  ASSERT_THAT(w2->Append("x"), IsOk());
  ASSERT_THAT(w2->Sync(), IsOk());  // synced data, but its directory entry is not

  fs.SetActive(false);
  EXPECT_THAT(w->Append("after crash"), StatusIs(StatusCode::kIOError, "inactive"));
  ASSERT_THAT(fs.DropUnsyncedData(), IsOk());
  fs.SetActive(true);

  ASSERT_OK_AND_ASSIGN(std::string s, ReadFileToString(&fs, "/d/seg"));
  EXPECT_EQ(s, "durable");
  EXPECT_FALSE(fs.FileExists("/d/new"));
}

TEST(FaultInjectionTest, InjectsEioEnospcAndShortReadsAtTheConfiguredRate) {
  auto mem = NewMemFileSystem();
  FaultInjectionFileSystem fs(mem.get());
  ASSERT_OK_AND_ASSIGN(auto w, fs.NewWritableFile("/f"));
  ASSERT_THAT(w->Append(std::string(1 << 16, 'z')), IsOk());

  FaultOptions o;
  o.one_in = 4;
  o.read_eio = true;
  o.read_short = true;
  o.write_enospc = true;
  o.seed = 42;
  fs.SetOptions(o);
  ASSERT_OK_AND_ASSIGN(auto r, fs.NewRandomAccessFile("/f"));
  int eio = 0, short_reads = 0, ok = 0;
  char buf[1024];
  for (int i = 0; i < 400; ++i) {
    auto got = r->Read(0, sizeof buf, buf);
    if (!got.ok()) {
      EXPECT_TRUE(got.status().IsIOError());
      ++eio;
    } else if (*got < sizeof buf) {
      ++short_reads;
    } else {
      ++ok;
    }
  }
  // 1 in 4 faulty, split between the two kinds: expect ~50 of each.
  EXPECT_GT(eio, 20);
  EXPECT_GT(short_reads, 20);
  EXPECT_GT(ok, 240);
  // ReadFull loops over short reads.
  int full = 0;
  for (int i = 0; i < 100; ++i) {
    auto got = ReadFull(*r, 0, sizeof buf, buf);
    if (got.ok() && *got == sizeof buf) ++full;
  }
  EXPECT_GT(full, 60);

  int enospc = 0;
  for (int i = 0; i < 200; ++i) {
    Status s = w->Append("abc");
    if (!s.ok()) {
      EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
      ++enospc;
    }
  }
  EXPECT_GT(enospc, 20);
  // ReadFull's retries drew faults too, so the total is at least what we counted.
  EXPECT_GE(fs.injected_faults(), static_cast<uint64_t>(eio + short_reads + enospc));
}

}  // namespace
}  // namespace tierkv

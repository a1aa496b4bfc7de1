#include "store/io_backend.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "store/format.h"
#include "testing/status_matchers.h"
#include "util/fault_injection_fs.h"

namespace tierkv::store {
namespace {

using ::tierkv::testing::StatusIs;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/tierkv_io_XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf " + path_).c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string WriteTestFile(FileSystem* fs, const std::string& path, size_t bytes) {
  std::string data(bytes, '\0');
  std::mt19937 rng(3);
  for (char& c : data) c = static_cast<char>(rng());
  auto f = fs->NewWritableFile(path);
  EXPECT_TRUE(f.ok());
  EXPECT_OK((*f)->Append(data));
  EXPECT_OK((*f)->Sync());
  EXPECT_OK((*f)->Close());
  return data;
}

class IoBackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "uring" && !UringAvailable()) GTEST_SKIP() << "io_uring refused by the kernel";
  }
};

// Random aligned reads of a real file with O_DIRECT at several depths,
// demand and prefetch mixed, some into a registered buffer.
TEST_P(IoBackendTest, DirectReadsAreExact) {
  TempDir dir;
  FileSystem* fs = FileSystem::Default();
  const size_t size = 4 << 20;
  std::string data = WriteTestFile(fs, dir.path() + "/f", size);
  FileOptions fo;
  fo.direct_io = true;
  ASSERT_OK_AND_ASSIGN(auto file, fs->NewRandomAccessFile(dir.path() + "/f", fo));
  for (uint32_t depth : {1u, 4u, 16u, 64u}) {
    ASSERT_OK_AND_ASSIGN(auto io, NewIoBackend(GetParam(), IoOptions{depth}));
    EXPECT_EQ(io->name(), GetParam());
    const size_t n = 200;
    AlignedBuffer buf = AllocateAligned(n * 16 * kBlockSize);
    if (depth == 16) {
      ASSERT_OK(io->RegisterBuffer(buf.get(), n * 16 * kBlockSize));
    }
    std::mt19937 rng(depth);
    std::vector<ReadOp> ops(n);
    for (size_t i = 0; i < n; ++i) {
      size_t blocks = 1 + rng() % 16;
      ops[i].file = file.get();
      ops[i].offset = (rng() % (size / kBlockSize - blocks)) * kBlockSize;
      ops[i].length = blocks * kBlockSize;
      ops[i].buf = buf.get() + i * 16 * kBlockSize;
      ops[i].prefetch = i % 3 == 0;
    }
    ASSERT_OK(io->Read(ops));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_OK(ops[i].status) << "depth " << depth << " op " << i;
      ASSERT_EQ(ops[i].done, ops[i].length);
      ASSERT_EQ(0, std::memcmp(ops[i].buf, data.data() + ops[i].offset, ops[i].length));
    }
  }
}

TEST_P(IoBackendTest, ReadPastEndIsShortNotAnError) {
  TempDir dir;
  FileSystem* fs = FileSystem::Default();
  std::string data = WriteTestFile(fs, dir.path() + "/f", 3 * kBlockSize);
  FileOptions fo;
  fo.direct_io = true;
  ASSERT_OK_AND_ASSIGN(auto file, fs->NewRandomAccessFile(dir.path() + "/f", fo));
  ASSERT_OK_AND_ASSIGN(auto io, NewIoBackend(GetParam(), IoOptions{8}));
  AlignedBuffer buf = AllocateAligned(8 * kBlockSize);
  ReadOp ops[2];
  ops[0] = ReadOp{file.get(), 2 * kBlockSize, 4 * kBlockSize, buf.get()};
  ops[1] = ReadOp{file.get(), 8 * kBlockSize, kBlockSize, buf.get() + 4 * kBlockSize};
  ASSERT_OK(io->Read(ops));
  ASSERT_OK(ops[0].status);
  EXPECT_EQ(ops[0].done, kBlockSize);
  EXPECT_EQ(0, std::memcmp(buf.get(), data.data() + 2 * kBlockSize, kBlockSize));
  ASSERT_OK(ops[1].status);
  EXPECT_EQ(ops[1].done, 0u);
}

// O_DIRECT needs aligned offsets: a misaligned read fails alone, its neighbours succeed.
TEST_P(IoBackendTest, MisalignedDirectReadFailsOnlyItself) {
  TempDir dir;
  FileSystem* fs = FileSystem::Default();
  WriteTestFile(fs, dir.path() + "/f", 8 * kBlockSize);
  FileOptions fo;
  fo.direct_io = true;
  ASSERT_OK_AND_ASSIGN(auto file, fs->NewRandomAccessFile(dir.path() + "/f", fo));
  ASSERT_OK_AND_ASSIGN(auto io, NewIoBackend(GetParam(), IoOptions{4}));
  AlignedBuffer buf = AllocateAligned(4 * kBlockSize);
  ReadOp ops[3];
  ops[0] = ReadOp{file.get(), 0, kBlockSize, buf.get()};
  ops[1] = ReadOp{file.get(), 100, kBlockSize, buf.get() + kBlockSize};
  ops[2] = ReadOp{file.get(), kBlockSize, kBlockSize, buf.get() + 2 * kBlockSize};
  ASSERT_OK(io->Read(ops));
  EXPECT_OK(ops[0].status);
  EXPECT_FALSE(ops[1].status.ok());
  EXPECT_OK(ops[2].status);
}

// Files without a descriptor (fault injection) go through Read(): short
// reads are retried, EIO reaches the op's status.
TEST_P(IoBackendTest, FaultInjectedFilesShortReadsAndEio) {
  auto mem = NewMemFileSystem();
  FaultInjectionFileSystem fs(mem.get());
  std::string data = WriteTestFile(&fs, "/f", 64 * kBlockSize);
  ASSERT_OK_AND_ASSIGN(auto file, fs.NewRandomAccessFile("/f"));
  ASSERT_OK_AND_ASSIGN(auto io, NewIoBackend(GetParam(), IoOptions{8}));
  FaultOptions fo;
  fo.one_in = 3;
  fo.read_short = true;
  fs.SetOptions(fo);
  std::vector<char> buf(64 * kBlockSize);
  std::vector<ReadOp> ops(16);
  for (size_t i = 0; i < ops.size(); ++i) {
    ops[i] = ReadOp{file.get(), i * 4 * kBlockSize, 4 * kBlockSize, buf.data() + i * 4 * kBlockSize};
  }
  ASSERT_OK(io->Read(ops));
  for (auto& op : ops) {
    ASSERT_OK(op.status);
    ASSERT_EQ(op.done, op.length);
  }
  EXPECT_EQ(0, std::memcmp(buf.data(), data.data(), data.size()));
  EXPECT_GT(fs.injected_faults(), 0u);
  fo.read_short = false;
  fo.read_eio = true;
  fo.one_in = 1;
  fs.SetOptions(fo);
  ASSERT_OK(io->Read(ops));
  for (auto& op : ops) EXPECT_THAT(op.status, StatusIs(StatusCode::kIOError));
}

INSTANTIATE_TEST_SUITE_P(Backends, IoBackendTest, ::testing::Values("uring", "pread"),
                         [](const auto& info) { return info.param; });

TEST(IoBackendFactoryTest, RejectsBadKindAndDepth) {
  EXPECT_THAT(NewIoBackend("spdk"), StatusIs(StatusCode::kInvalidArgument, "unknown I/O backend"));
  EXPECT_THAT(NewIoBackend("pread", IoOptions{0}), StatusIs(StatusCode::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(auto io, NewIoBackend("auto"));
  EXPECT_EQ(io->name(), UringAvailable() ? "uring" : "pread");
}

}  // namespace
}  // namespace tierkv::store

// Regression tests for issue #57, item 3 (docs/failure-semantics.md row 94):
// a cache directory holds prompts (every record header lists its token ids),
// so the store keeps it private to its owner.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "store/chunk_store.h"
#include "store/kv_fixture.h"
#include "testing/status_matchers.h"

namespace tierkv::store {
namespace {

using ::tierkv::testing::StatusIs;
using testing::Prompt;
using testing::PromptKv;
using testing::TempDir;
using Tokens = std::vector<int32_t>;
namespace stdfs = std::filesystem;

constexpr uint16_t kLayers = 2;
constexpr uint32_t kRow = 256;
constexpr uint32_t kChunk = 16;

StoreOptions Options(const std::string& dir) {
  StoreOptions o;
  o.dir = dir;
  o.fingerprint = 0x57ULL;
  o.chunk_tokens = kChunk;
  o.layers = kLayers;
  o.row_bytes = kRow;
  o.segment_bytes = 1 << 20;
  o.owner_files = {"car-profile.json"};
  return o;
}

Status PutPrompt(ChunkStore& store, const Tokens& p) {
  return store.Put(p, PromptKv(p, kLayers, kRow).input).status();
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// Restores the process's umask when the test ends.
class Umask {
 public:
  explicit Umask(mode_t m) : old_(::umask(m)) {}
  ~Umask() { ::umask(old_); }

 private:
  mode_t old_;
};

// Every file a store (and its owner) creates in the directory is 0600 and the
// directory 0700, under the common umask 022 (before: 0644 and 0755).
TEST(CacheDirPrivacyTest, EveryFileIsOwnerOnlyUnderUmask022) {
  Umask umask(022);
  TempDir parent;
  const std::string dir = parent.path() + "/cache";
  std::map<std::string, mode_t> modes;
  {
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir)));
    ASSERT_OK(PutPrompt(*store, Prompt(1, 0, 40)));
    ASSERT_OK(store->Checkpoint());  // MANIFEST
    // What the engine writes beside the store (its car profile).
    ASSERT_OK(WriteFileAtomically(FileSystem::Default(), dir + "/car-profile.json", "{}"));
    for (const auto& e : stdfs::directory_iterator(dir)) {
      modes[e.path().filename()] = ModeOf(e.path());
    }
  }
  EXPECT_EQ(ModeOf(dir), 0700u);
  for (const char* must : {"STORE", "LOCK", "MANIFEST", "seg-000001.tkv", "car-profile.json"}) {
    EXPECT_TRUE(modes.count(must)) << must;
  }
  for (const auto& [name, mode] : modes) EXPECT_EQ(mode, 0600u) << name;
}

// A directory others may read (made by hand, or by an older tierkv) is
// tightened to 0700 when a store opens it for writing.
TEST(CacheDirPrivacyTest, AnOpenDirectoryIsMadePrivate) {
  TempDir parent;
  const std::string dir = parent.path() + "/cache";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  {
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir)));
    ASSERT_OK(PutPrompt(*store, Prompt(2, 0, 20)));
  }
  EXPECT_EQ(ModeOf(dir), 0700u);
}

// A directory another user owns is refused: its owner could read (and
// plant) what this user stores; chmod would only hide the problem.
TEST(CacheDirPrivacyTest, ADirectoryOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  TempDir parent;
  const std::string dir = parent.path() + "/cache";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  EXPECT_THAT(ChunkStore::Open(Options(dir)),
              StatusIs(StatusCode::kInvalidArgument, "is owned by another user"));
  EXPECT_TRUE(stdfs::is_empty(dir));
}

}  // namespace
}  // namespace tierkv::store

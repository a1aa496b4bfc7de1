// Regression tests for issue #57, items 3 and 7 (docs/failure-semantics.md
// rows 94 to 96): a cache directory holds prompts (every record header lists
// its token ids), so the store keeps it private to its owner; and a store
// whose directory is removed or replaced under it stops storing, loudly,
// and never writes into a directory another store now owns.
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

// The names, sizes and modification times of a directory's files.
std::map<std::string, std::pair<uintmax_t, stdfs::file_time_type>> Listing(const std::string& dir) {
  std::map<std::string, std::pair<uintmax_t, stdfs::file_time_type>> out;
  for (const auto& e : stdfs::directory_iterator(dir)) {
    out[e.path().filename()] = {e.file_size(), e.last_write_time()};
  }
  return out;
}

// rm -rf of the cache directory while a store writes into it: the next Put
// fails naming the problem, the statistic says so, and what the index holds
// still reads back from the open files (before: Puts went on "succeeding"
// into unlinked files).
TEST(DirectoryLostTest, RemovedDirectoryStopsStoringLoudly) {
  TempDir parent;
  const std::string dir = parent.path() + "/cache";
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir)));
  const Tokens kept = Prompt(1, 0, 40);
  ASSERT_OK(PutPrompt(*store, kept));
  stdfs::remove_all(dir);
  EXPECT_THAT(PutPrompt(*store, Prompt(2, 0, 40)),
              StatusIs(StatusCode::kIOError, "was removed or replaced; storing stopped"));
  EXPECT_TRUE(store->stats().directory_lost);
  EXPECT_THAT(PutPrompt(*store, Prompt(3, 0, 40)), StatusIs(StatusCode::kIOError, "storing stopped"));
  EXPECT_THAT(store->Checkpoint(), StatusIs(StatusCode::kIOError, "storing stopped"));
  // What the index holds reads back exactly from the open segment.
  const LookupResult m = store->Lookup(kept);
  ASSERT_EQ(m.matched_tokens, kept.size());
  const PromptKv want(kept, kLayers, kRow);
  std::string k(kChunk * kRow, '\0'), v = k;
  ChunkRead r{m.chunks[0], m.prefix_hashes[0], 1, k.data(), v.data()};
  ASSERT_OK(store->Read(std::span<ChunkRead>(&r, 1)));
  ASSERT_OK(r.status);
  EXPECT_EQ(k, want.k[1].substr(0, k.size()));
  EXPECT_EQ(v, want.v[1].substr(0, v.size()));
  store.reset();
  EXPECT_FALSE(stdfs::exists(dir));  // nothing (no manifest at close) recreated it
}

// The periodic check (the engine's maintenance) notices without a Put.
TEST(DirectoryLostTest, TheCheckNoticesWithoutAPut) {
  TempDir parent;
  const std::string dir = parent.path() + "/cache";
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(Options(dir)));
  ASSERT_OK(store->CheckDirectory());
  stdfs::remove_all(dir);
  EXPECT_THAT(store->CheckDirectory(), StatusIs(StatusCode::kIOError, "storing stopped"));
  EXPECT_TRUE(store->stats().directory_lost);
}

// The directory renamed away and a new one made at its path: the first store
// stops storing; a second store may then open the new directory (its LOCK
// is a new file, and the first store never writes by that path again), and
// the first store's Puts, checkpoint and close leave it untouched.
TEST(DirectoryLostTest, AReplacedDirectoryBelongsToTheSecondStoreAlone) {
  TempDir parent;
  const std::string dir = parent.path() + "/cache";
  ASSERT_OK_AND_ASSIGN(auto first, ChunkStore::Open(Options(dir)));
  ASSERT_OK(PutPrompt(*first, Prompt(1, 0, 40)));
  stdfs::rename(dir, parent.path() + "/old");
  ASSERT_TRUE(stdfs::create_directory(dir));
  EXPECT_THAT(PutPrompt(*first, Prompt(2, 0, 40)),
              StatusIs(StatusCode::kIOError, "was removed or replaced; storing stopped"));
  EXPECT_TRUE(first->stats().directory_lost);

  const Tokens theirs = Prompt(3, 0, 40);
  {
    ASSERT_OK_AND_ASSIGN(auto second, ChunkStore::Open(Options(dir)));
    ASSERT_OK(PutPrompt(*second, theirs));
    ASSERT_OK(second->Checkpoint());
    const auto before = Listing(dir);
    EXPECT_THAT(PutPrompt(*first, Prompt(4, 0, 40)), StatusIs(StatusCode::kIOError, "storing stopped"));
    EXPECT_THAT(first->Checkpoint(), StatusIs(StatusCode::kIOError, "storing stopped"));
    EXPECT_THAT(first->Compact(0.01).status(), StatusIs(StatusCode::kIOError, "storing stopped"));
    first.reset();
    EXPECT_EQ(Listing(dir), before);
  }
  ASSERT_OK_AND_ASSIGN(auto again, ChunkStore::Open(Options(dir)));
  EXPECT_EQ(again->Lookup(theirs).matched_tokens, theirs.size());
  EXPECT_EQ(again->Lookup(Prompt(1, 0, 40)).matched_tokens, 0u);
}

}  // namespace
}  // namespace tierkv::store

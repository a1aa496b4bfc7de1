// StoreQueue (issue 57 (4)): a store on an in-memory file system whose
// syncs wait at a gate, so that a put can be held running as long as a
// test likes (a slow disk, short of a stall, or a stall).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine/store_queue.h"
#include "remote/store_tiers.h"
#include "store/chunk_store.h"
#include "store/kv_fixture.h"
#include "testing/status_matchers.h"
#include "tierkv/filesystem.h"

namespace tierkv::engine {
namespace {

using std::chrono::milliseconds;

class Gate {
 public:
  void Close() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = false;
  }
  void Open() {
    {
      std::lock_guard<std::mutex> l(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void Pass() {
    std::unique_lock<std::mutex> l(mu_);
    ++waiting_;
    cv_.wait(l, [&] { return open_; });
    --waiting_;
  }
  int waiting() {
    std::lock_guard<std::mutex> l(mu_);
    return waiting_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  int waiting_ = 0;
};

class GatedFile final : public WritableFile {
 public:
  GatedFile(std::unique_ptr<WritableFile> f, Gate* g) : f_(std::move(f)), g_(g) {}
  Status Append(std::string_view data) override { return f_->Append(data); }
  Status Sync() override {
    g_->Pass();
    return f_->Sync();
  }
  Status Close() override { return f_->Close(); }
  uint64_t Size() const override { return f_->Size(); }

 private:
  std::unique_ptr<WritableFile> f_;
  Gate* g_;
};

class GatedFs final : public FileSystem {
 public:
  explicit GatedFs(Gate* g) : base_(NewMemFileSystem()), g_(g) {}
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& p,
                                                                const FileOptions& o) override {
    return base_->NewRandomAccessFile(p, o);
  }
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& p, bool truncate) override {
    ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, base_->NewWritableFile(p, truncate));
    return std::unique_ptr<WritableFile>(new GatedFile(std::move(f), g_));
  }
  Status CreateDir(const std::string& p) override { return base_->CreateDir(p); }
  Status DeleteFile(const std::string& p) override { return base_->DeleteFile(p); }
  Status RenameFile(const std::string& a, const std::string& b) override { return base_->RenameFile(a, b); }
  Status SyncDir(const std::string& p) override { return base_->SyncDir(p); }
  Status Truncate(const std::string& p, uint64_t n) override { return base_->Truncate(p, n); }
  Result<std::vector<std::string>> ListDir(const std::string& p) override { return base_->ListDir(p); }
  Result<uint64_t> FileSize(const std::string& p) override { return base_->FileSize(p); }
  bool FileExists(const std::string& p) override { return base_->FileExists(p); }
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& p) override { return base_->LockFile(p); }

 private:
  std::unique_ptr<FileSystem> base_;
  Gate* g_;
};

constexpr uint16_t kLayers = 2;
constexpr uint32_t kRow = 256;
constexpr uint32_t kChunk = 16;

struct Fixture {
  Gate gate;
  GatedFs fs{&gate};
  std::unique_ptr<store::ChunkStore> store;
  std::unique_ptr<remote::StoreTiers> tiers;
  Fixture() {
    store::StoreOptions o;
    o.dir = "/review";
    o.fs = &fs;
    o.fingerprint = 0x5eedULL;
    o.chunk_tokens = kChunk;
    o.layers = kLayers;
    o.row_bytes = kRow;
    o.dtype = store::KvDtype::kF16;
    o.segment_bytes = 1 << 20;
    auto s = store::ChunkStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    store = std::move(s).value();
    auto t = remote::StoreTiers::Open(store.get(), RemoteOptions{}, remote::RemoteGeometry{0x5eedULL, kLayers, kRow, kChunk},
                                      [](uint64_t, uint16_t, std::span<const char>) {});
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    tiers = std::move(t).value();
  }
};

StoreQueue::Job JobOf(const std::vector<int32_t>& tokens) {
  store::testing::PromptKv kv(tokens, kLayers, kRow);
  StoreQueue::Job j;
  j.tokens = tokens;
  j.k = kv.k;
  j.v = kv.v;
  return j;
}

// Found in review: AwaitPrefix waited (up to 200 ms, on the scheduler
// thread) whenever a queued or running put shared the prompt's first
// chunk, even when that chunk (here the whole shared system prompt) was
// stored already and the put added nothing the prompt could reuse. The
// caller (Engine::Attempt) now asks for its local match plus a chunk.
TEST(StoreQueueTest, AwaitPrefixDoesNotWaitForAPutThatAddsNothingItCanReuse) {
  Fixture f;
  const std::vector<int32_t> system = store::testing::Prompt(1, 2 * kChunk, 2 * kChunk);
  {
    store::testing::PromptKv kv(system, kLayers, kRow);
    ASSERT_OK(f.tiers->Put(system, kv.input).status());  // the system prompt is stored
  }
  StoreQueue q(f.tiers.get(), 1ull << 30);
  f.gate.Close();
  ASSERT_TRUE(q.Enqueue(JobOf(store::testing::Prompt(2, 2 * kChunk, 4 * kChunk))));
  while (f.gate.waiting() == 0) std::this_thread::sleep_for(milliseconds(1));  // the put is running
  const std::vector<int32_t> other = store::testing::Prompt(3, 2 * kChunk, 4 * kChunk);
  ASSERT_EQ(f.store->Lookup(other, 0).matched_tokens, 2 * kChunk);  // all it can share is stored
  const auto t0 = std::chrono::steady_clock::now();
  const size_t want = f.store->Lookup(other, 0).matched_tokens / kChunk * kChunk + kChunk;  // as Engine::Attempt
  q.AwaitPrefix(other, 0, want, milliseconds(200));
  const auto ms = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t0).count();
  // A prompt the running put does extend waits for it (here: until the time runs out).
  const std::vector<int32_t> same = store::testing::Prompt(2, 2 * kChunk, 4 * kChunk);
  const auto t1 = std::chrono::steady_clock::now();
  q.AwaitPrefix(same, 0, f.store->Lookup(same, 0).matched_tokens / kChunk * kChunk + kChunk, milliseconds(100));
  const auto waited = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t1).count();
  f.gate.Open();
  EXPECT_LT(ms, 50) << "waited for a put adding nothing this prompt can reuse";
  EXPECT_GE(waited, 90) << "did not wait for the put of its own prompt";
}

// Checked: destruction with a put running waits for that put, drops what
// is queued (counted), and the byte accounting ends at zero; a stalled
// writer makes AwaitPrefix return at once and Enqueue drop.
TEST(StoreQueueTest, StallDropsAndDestructionWithAPutRunning) {
  Fixture f;
  auto q = std::make_unique<StoreQueue>(f.tiers.get(), 1ull << 30);
  f.gate.Close();
  const auto a = store::testing::Prompt(4, 0, 2 * kChunk);
  ASSERT_TRUE(q->Enqueue(JobOf(a)));
  while (f.gate.waiting() == 0) std::this_thread::sleep_for(milliseconds(1));
  ASSERT_TRUE(q->Enqueue(JobOf(store::testing::Prompt(5, 0, 2 * kChunk))));
  EXPECT_EQ(q->stats().queued, 1u);
  std::this_thread::sleep_for(milliseconds(static_cast<int>(StoreQueue::kStallMs) + 100));
  EXPECT_TRUE(q->stats().stalled);
  EXPECT_FALSE(q->Enqueue(JobOf(store::testing::Prompt(6, 0, 2 * kChunk))));
  const auto t0 = std::chrono::steady_clock::now();
  q->AwaitPrefix(a, 0, kChunk, milliseconds(200));
  EXPECT_LT(std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t0).count(), 20);
  std::thread opener([&] {
    std::this_thread::sleep_for(milliseconds(100));
    f.gate.Open();
  });
  q.reset();  // waits for the running put (the gate), drops the queued one
  opener.join();
  EXPECT_EQ(f.store->Lookup(a, 0).matched_tokens, 2 * kChunk);
}

}  // namespace
}  // namespace tierkv::engine

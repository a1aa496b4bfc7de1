// A disk that fills mid-run (label `soak`): the cache directory is a small
// ext4 file system on a loop device (needs root and a free loop device; the
// test skips, saying so, without them). Requests keep answering exactly as
// recompute does; a store that meets ENOSPC evicts, compacts and tries once
// more, so storing goes on (what still fails is counted in store_failed),
// a reordering round on the full disk fails cleanly, and once space is
// freed storing works again.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "engine/model_fixture.h"
#include "store/kv_fixture.h"
#include "testing/status_matchers.h"
#include "tierkv/engine.h"

namespace tierkv::engine {
namespace {

namespace fs = std::filesystem;

// A mounted ext4 image of `mib` MiB; unmounted and removed with the object.
class SmallDisk {
 public:
  explicit SmallDisk(int mib) {
    char tmpl[] = "/var/tmp/tierkv_disk_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return;
    base_ = tmpl;
    const std::string img = base_ + "/disk.img", mnt = base_ + "/mnt";
    fs::create_directories(mnt);
    const std::string cmd = "dd if=/dev/zero of=" + img + " bs=1M count=" + std::to_string(mib) +
                            " status=none && mkfs.ext4 -q -F " + img + " >/dev/null 2>&1 && mount -o loop " +
                            img + " " + mnt + " >/dev/null 2>&1";
    mounted_ = ::geteuid() == 0 && std::system(cmd.c_str()) == 0;
    if (mounted_) dir_ = mnt;
  }
  ~SmallDisk() {
    if (mounted_) std::system(("umount " + dir_ + " >/dev/null 2>&1").c_str());
    if (!base_.empty()) fs::remove_all(base_);
  }
  bool mounted() const { return mounted_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string base_, dir_;
  bool mounted_ = false;
};

class DiskFullTest : public DefaultModelTest {};

TEST_F(DiskFullTest, RequestsAnswerWhileStoringFailsAndStoringResumesAfterFreeing) {
  SmallDisk disk(24);
  if (!disk.mounted()) GTEST_SKIP() << "needs root and a loop device to mount a small ext4 disk";
  const std::string cache = disk.dir() + "/cache";
  EngineOptions o;
  o.system = System::kImpress;
  o.cache_dir = cache;
  o.retention = 1.0;
  ASSERT_OK_AND_ASSIGN(auto eng, Engine::Open(*model_, o));
  EngineOptions ro;
  ro.system = System::kRecompute;
  ASSERT_OK_AND_ASSIGN(auto rec, Engine::Open(*model_, ro));
  // Distinct prompts of ~620 tokens: about 6.4 MB of records each and as
  // much again for impress's importance-ordered copy, so the disk fills
  // after a few.
  int failed = 0, requests = 0;
  double worst = 0;
  for (int i = 0; i < 16; ++i) {
    const std::vector<int32_t> p = Prompt(64 + 40 * i, 200 + 97 * i, 576);
    ASSERT_OK_AND_ASSIGN(ServeResult r, eng->Serve(p));
    ASSERT_OK_AND_ASSIGN(ServeResult want, rec->Serve(p));
    for (size_t j = 0; j < want.logits.size(); ++j) {
      worst = std::max(worst, std::fabs(double(r.logits[j]) - want.logits[j]));
    }
    failed += r.stats.store_failed;
    ++requests;
  }
  const store::StoreStats st = eng->StoreStatistics();
  std::printf("%d requests on a 24 MiB disk: %llu met ENOSPC (evicted, compacted, tried again), %d could "
              "not store their prompt; max |dlogit| vs recompute %.3g\n",
              requests, static_cast<unsigned long long>(st.nospace_retries), failed, worst);
  EXPECT_GT(st.nospace_retries, 0u) << "the disk never filled: make the prompts longer";
  EXPECT_EQ(st.put_failures, static_cast<uint64_t>(failed));
  EXPECT_LT(failed, requests / 2) << "a full disk should cost a few stores, not disable storing";
  EXPECT_LE(worst, 5e-2);
  // Failed writes were cut off again: no empty segment file is left.
  for (const auto& e : fs::directory_iterator(cache)) {
    if (e.path().filename().string().rfind("seg-", 0) == 0) {
      EXPECT_GT(e.file_size(), 0u) << e.path();
    }
  }
  // A reordering round on the full disk fails as a Status, nothing more.
  auto maint = eng->Maintain();
  if (!maint.ok()) std::printf("maintenance on the full disk: %s\n", maint.status().ToString().c_str());
  // Free space (what another tenant of the disk held) and store again.
  eng.reset();
  for (const auto& e : fs::directory_iterator(cache)) {
    if (e.path().filename().string().rfind("seg-", 0) == 0) fs::remove(e.path());
  }
  fs::remove(cache + "/MANIFEST");
  ASSERT_OK_AND_ASSIGN(eng, Engine::Open(*model_, o));
  const std::vector<int32_t> p = Prompt(640, 3000, 20);
  ASSERT_OK_AND_ASSIGN(ServeResult stored, eng->Serve(p));
  EXPECT_FALSE(stored.stats.store_failed);
  EXPECT_GT(stored.stats.stored_chunks, 0u);
  ASSERT_OK_AND_ASSIGN(ServeResult again, eng->Serve(p));
  // Everything but the last token: 640 rows of whole chunks, 19 read whole.
  EXPECT_EQ(again.stats.reused_tokens, p.size() - 1);
}

}  // namespace
}  // namespace tierkv::engine

// The scheduler on the default model with a real engine and store: fcfs
// starts waiting jobs in arrival order; car starts them by where their
// prefix K/V is (pools, then nothing stored, then disk), and its timed
// prefetcher loads a waiting job's prefix from disk into the pools so that
// it starts from memory, with the same text as without.
#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "engine/model_fixture.h"
#include "testing/status_matchers.h"

namespace tierkv::sched {
namespace {

using engine::PrefixPlace;
using namespace std::chrono_literals;

class SchedulerTest : public engine::DefaultModelTest {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tierkv-sched-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    auto tok = LoadTokenizerFor(*model_, "");
    ASSERT_TRUE(tok.ok());
    tok_ = std::move(tok).value();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<engine::Engine> Open() {
    engine::EngineOptions o;
    o.system = engine::System::kAsLike;
    o.cache_dir = dir_.string();
    o.disk.calibrate_io = false;
    auto e = engine::Engine::Open(*model_, o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(e).value();
  }

  // BOS, then `n` corpus tokens from `from`, then a short question.
  static std::vector<int32_t> Doc(size_t from, size_t n) {
    std::vector<int32_t> t = {(*corpus_)[0]};
    t.insert(t.end(), corpus_->begin() + from, corpus_->begin() + from + n);
    t.insert(t.end(), corpus_->begin() + 5, corpus_->begin() + 17);
    return t;
  }

  static std::shared_ptr<Job> NewJob(std::vector<int32_t> prompt, int max_tokens) {
    GenerationParams g;
    g.prompt = std::move(prompt);
    g.max_tokens = max_tokens;
    g.ignore_eos = true;
    g.sampler.temperature = 0;
    return std::make_shared<Job>(std::move(g));
  }

  // The stores: B on disk only (stored by an engine since closed), A in the
  // pools (served twice by this one), C never seen.
  std::unique_ptr<engine::Engine> Prepare() {
    {
      auto first = Open();
      EXPECT_TRUE(first->Serve(b_).ok());
    }
    auto e = Open();
    EXPECT_TRUE(e->Serve(a_).ok());
    EXPECT_TRUE(e->Serve(a_).ok());
    EXPECT_EQ(e->Locate(a_).place, PrefixPlace::kPools);
    EXPECT_EQ(e->Locate(b_).place, PrefixPlace::kDisk);
    EXPECT_GT(e->Locate(b_).disk_bytes, 0u);
    EXPECT_EQ(e->Locate(c_).place, PrefixPlace::kNone);
    return e;
  }

  struct Ended {
    int prompt_tag;  // 'A', 'B', 'C' or 0
    Outcome out;
  };

  // A long job holds the only slot while B, C and A (in that order) wait;
  // `ready` says when to let it go (cancelled). The waiting jobs' ends, in
  // order (one slot: the order they started).
  std::vector<Ended> Run(engine::Engine* e, SchedulerOptions so,
                         const std::function<bool(Scheduler&)>& ready) {
    std::vector<Ended> ended;
    Mutex mu;  // guards ended (the scheduler thread appends)
    so.max_running = 1;
    Scheduler s(*model_, *tok_, e, so, [&](const Outcome& o, double) {
      MutexLock l(&mu);
      ended.push_back({0, o});
    });
    auto hold = NewJob(Doc(1200, 64), 3000);
    EXPECT_OK(s.Submit(hold));
    while (s.running() == 0) std::this_thread::sleep_for(1ms);
    std::vector<std::shared_ptr<Job>> jobs = {NewJob(b_, 6), NewJob(c_, 6), NewJob(a_, 6)};
    for (auto& j : jobs) EXPECT_OK(s.Submit(j));
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (!ready(s) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
    EXPECT_TRUE(ready(s)) << "timed out";
    hold->Cancel();
    for (auto& j : jobs) j->Wait();
    s.Shutdown(0ms);
    MutexLock l(&mu);
    EXPECT_EQ(ended.size(), 4u);
    std::vector<Ended> out;
    for (size_t i = 1; i < ended.size(); ++i) {
      Ended x = ended[i];
      for (size_t k = 0; k < jobs.size(); ++k) {  // the prompts' lengths differ
        if (x.out.prefill.prompt_tokens != jobs[k]->params().prompt.size()) continue;
        x.prompt_tag = "BCA"[k];
        x.out.text = jobs[k]->Wait().text;  // the observer's outcome has no text
      }
      out.push_back(x);
    }
    return out;
  }

  static std::string Tags(const std::vector<Ended>& v) {
    std::string s;
    for (const Ended& x : v) s += static_cast<char>(x.prompt_tag ? x.prompt_tag : '?');
    return s;
  }

  std::filesystem::path dir_;
  std::unique_ptr<Tokenizer> tok_;
  // Of different lengths: an outcome says which it was by its prompt's.
  const std::vector<int32_t> a_ = Doc(100, 256), b_ = Doc(400, 250), c_ = Doc(700, 244);
};

TEST_F(SchedulerTest, FcfsStartsInArrivalOrder) {
  auto e = Prepare();
  SchedulerOptions so;
  so.kind = SchedulerKind::kFcfs;
  const auto ended = Run(e.get(), so, [](Scheduler& s) { return s.queued() == 3; });
  EXPECT_EQ(Tags(ended), "BCA");
  EXPECT_EQ(ended[0].out.waited_as, PrefixPlace::kDisk);
  EXPECT_GT(ended[0].out.prefill.disk_reads, 0u);
}

TEST_F(SchedulerTest, CarStartsPooledThenUnstoredThenDiskPrefixes) {
  auto e = Prepare();
  SchedulerOptions so;
  so.kind = SchedulerKind::kCar;
  so.prefetch = false;
  const auto ended = Run(e.get(), so, [](Scheduler& s) { return s.queued() == 3; });
  EXPECT_EQ(Tags(ended), "ACB");
  EXPECT_EQ(ended[0].out.started_as, PrefixPlace::kPools);
  EXPECT_EQ(ended[0].out.prefill.disk_reads, 0u);
  EXPECT_EQ(ended[1].out.started_as, PrefixPlace::kNone);
  EXPECT_EQ(ended[2].out.started_as, PrefixPlace::kDisk);
  EXPECT_FALSE(ended[2].out.prefetched);
  EXPECT_GT(ended[2].out.prefill.disk_reads, 0u);
}

TEST_F(SchedulerTest, CarPrefetchesAWaitingDiskPrefixIntoThePools) {
  auto e = Prepare();
  const std::string reference = [&] {
    // B's text when it loads its prefix itself.
    SchedulerOptions so;
    Scheduler s(*model_, *tok_, e.get(), so);
    auto j = NewJob(b_, 6);
    EXPECT_OK(s.Submit(j));
    return j->Wait().text;
  }();
  // That run put B in the pools: start again from a store where it is only on disk.
  e.reset();
  e = Open();
  EXPECT_TRUE(e->Serve(a_).ok());
  EXPECT_TRUE(e->Serve(a_).ok());
  ASSERT_EQ(e->Locate(b_).place, PrefixPlace::kDisk);
  SchedulerOptions so;
  so.kind = SchedulerKind::kCar;
  so.prefetch = true;
  const auto ended = Run(e.get(), so, [](Scheduler& s) {
    return s.queued() == 3 && s.stats().prefetch.prefetches == 1;
  });
  ASSERT_EQ(ended.size(), 3u);
  // B was disk when it entered the window, pools when it started: it now
  // ranks with A (older than A, it goes first), before C.
  EXPECT_EQ(Tags(ended), "BAC");
  const Outcome& b = ended[0].out;
  EXPECT_EQ(b.waited_as, PrefixPlace::kDisk);
  EXPECT_EQ(b.started_as, PrefixPlace::kPools);
  EXPECT_TRUE(b.prefetched);
  EXPECT_EQ(b.prefill.disk_reads, 0u) << "every chunk layer from the pools";
  EXPECT_GT(b.prefill.reused_tokens, 0u);
  EXPECT_EQ(b.text, reference);
}

TEST_F(SchedulerTest, AStopStringEndsTheTextBeforeItsFirstOccurrence) {
  auto e = Open();
  Scheduler s(*model_, *tok_, e.get(), SchedulerOptions{});
  auto free_run = NewJob(c_, 24);
  ASSERT_OK(s.Submit(free_run));
  const Outcome ref = free_run->Wait();
  ASSERT_EQ(ref.reason, FinishReason::kLength);
  ASSERT_GE(ref.text.size(), 12u) << ref.text;
  // Three ASCII characters from the first half of the greedy text (the last
  // token may be long): the run with them as a stop string ends where they
  // first occur.
  size_t from = ref.text.size() / 4;
  auto ascii = [&](size_t i) { return static_cast<unsigned char>(ref.text[i]) < 0x80; };
  while (from + 3 <= ref.text.size() / 2 && !(ascii(from) && ascii(from + 1) && ascii(from + 2))) ++from;
  ASSERT_LE(from + 3, ref.text.size() / 2) << "no ASCII run in " << ref.text;
  const std::string stop = ref.text.substr(from, 3);
  const size_t at = ref.text.find(stop);
  auto stopped = NewJob(c_, 24);
  GenerationParams g = stopped->params();
  g.stop = {"no such text anywhere", stop};
  stopped = std::make_shared<Job>(std::move(g));
  ASSERT_OK(s.Submit(stopped));
  const Outcome out = stopped->Wait();
  EXPECT_EQ(out.reason, FinishReason::kStop);
  EXPECT_EQ(out.text, ref.text.substr(0, at)) << "stop " << stop;
  EXPECT_LT(out.completion_tokens, ref.completion_tokens);
  s.Shutdown(0ms);
}

}  // namespace
}  // namespace tierkv::sched

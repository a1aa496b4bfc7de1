#include "util/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace tierkv {
namespace {

TEST(ThreadPoolTest, EveryIndexRunsExactlyOnce) {
  for (int workers : {0, 1, 3}) {
    ThreadPool pool(workers, "test");
    EXPECT_EQ(pool.workers(), workers);
    for (int n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, [&](int i) { hits[i].fetch_add(1); });
      for (int i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << workers << " " << n << " " << i;
    }
  }
}

TEST(ThreadPoolTest, ConcurrentCallersShareThePool) {
  ThreadPool pool(2, "test");
  std::atomic<long> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int round = 0; round < 200; ++round) {
        pool.ParallelFor(16, [&](int i) { total.fetch_add(i); });
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4L * 200 * (15 * 16 / 2));
}

TEST(ThreadPoolTest, WorkRunsOnMoreThanOneThreadWhenWorkersExist) {
  ThreadPool pool(1, "test");
  std::atomic<int> seen_other{0};
  const auto caller = std::this_thread::get_id();
  for (int round = 0; round < 50 && seen_other.load() == 0; ++round) {
    pool.ParallelFor(64, [&](int) {
      if (std::this_thread::get_id() != caller) seen_other.store(1);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
  }
  EXPECT_EQ(seen_other.load(), 1);
}

}  // namespace
}  // namespace tierkv

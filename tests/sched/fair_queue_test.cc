// The scheduler's queue shared between tenants (issue 57, item 6): jobs
// leave with the tenants taking turns, a tenant's share of the places while
// others wait, and the place a tenant over its share gives up when full.
#include "sched/fair_queue.h"

#include <gtest/gtest.h>

namespace tierkv::sched {
namespace {

std::shared_ptr<Job> JobOf(uint32_t tenant, int id) {
  GenerationParams g;
  g.prompt = {1, id};
  g.tenant = tenant;
  return std::make_shared<Job>(g);
}

TEST(FairQueueTest, TenantsTakeTurnsAndTheFewestRunningGoesFirst) {
  FairQueue q;
  std::shared_ptr<Job> none;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(q.Push(JobOf(1, 10 + i), 64, false, &none).ok());
  ASSERT_TRUE(q.Push(JobOf(2, 20), 64, false, &none).ok());
  ASSERT_TRUE(q.Push(JobOf(2, 21), 64, false, &none).ok());
  std::map<uint32_t, size_t> running;
  std::vector<int> order;
  while (auto j = q.Take(running)) order.push_back(j->params().prompt[1]);
  EXPECT_EQ(order, (std::vector<int>{10, 20, 11, 21, 12, 13}));
  // A tenant with jobs running waits for one with fewer.
  ASSERT_TRUE(q.Push(JobOf(1, 14), 64, false, &none).ok());
  ASSERT_TRUE(q.Push(JobOf(2, 22), 64, false, &none).ok());
  std::map<uint32_t, size_t> busy{{2, 3}};
  EXPECT_EQ(q.Take(busy)->params().prompt[1], 14);
  EXPECT_EQ(busy[1], 1u);
  EXPECT_EQ(q.Take(busy)->params().prompt[1], 22);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(none, nullptr);
}

TEST(FairQueueTest, ATenantHoldsItsShareWhileOthersWaitAndGivesUpItsNewestWhenFull) {
  FairQueue q;
  std::shared_ptr<Job> evicted;
  // Alone, a tenant may take every place.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(q.Push(JobOf(1, i), 4, false, &evicted).ok());
  EXPECT_EQ(q.Push(JobOf(1, 4), 4, true, &evicted).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(evicted, nullptr);
  // Full: another tenant takes the newest place of the one over its share (2 of 4).
  ASSERT_TRUE(q.Push(JobOf(2, 20), 4, true, &evicted).ok());
  ASSERT_NE(evicted, nullptr);
  EXPECT_EQ(evicted->params().prompt[1], 3);
  evicted.reset();
  ASSERT_TRUE(q.Push(JobOf(2, 21), 4, true, &evicted).ok());
  ASSERT_NE(evicted, nullptr);
  EXPECT_EQ(evicted->params().prompt[1], 2);
  evicted.reset();
  // Both at their share: the next of either is refused, nobody evicted.
  EXPECT_EQ(q.Push(JobOf(2, 22), 4, false, &evicted).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(q.Push(JobOf(1, 5), 4, false, &evicted).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(evicted, nullptr);
  EXPECT_EQ(q.size(), 4u);
}

}  // namespace
}  // namespace tierkv::sched

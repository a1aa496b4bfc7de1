// The fcfs waiting policy: jobs leave the queue only into free slots and
// start in arrival order in the same round; a drain's CancelAll reaches the
// jobs it holds. (car's policy needs an engine to locate prefixes: the
// scheduler tests drive it.)
#include "sched/waiting_policy.h"

#include <gtest/gtest.h>

namespace tierkv::sched {
namespace {

std::shared_ptr<Job> JobWith(int id) {
  GenerationParams g;
  g.prompt = {1, id};
  return std::make_shared<Job>(g);
}

TEST(WaitingPolicyTest, FcfsTakesOnlyFreeSlotsAndStartsInArrivalOrder) {
  auto fcfs = MakeWaitingPolicy(SchedulerKind::kFcfs, nullptr, 0, false);
  ASSERT_NE(fcfs, nullptr);
  EXPECT_FALSE(fcfs->raises_events());
  EXPECT_EQ(fcfs->Room(1, 4), 3u);
  EXPECT_EQ(fcfs->Room(4, 4), 0u);
  EXPECT_EQ(fcfs->Room(5, 4), 0u);  // never negative
  EXPECT_FALSE(fcfs->keeps_waiting());  // what it takes starts in the same round
  fcfs->Arrive({JobWith(7), JobWith(8)});
  EXPECT_EQ(fcfs->size(), 2u);
  EXPECT_EQ(fcfs->Room(1, 4), 1u);  // the held jobs take their slots
  std::optional<Release> first = fcfs->Next(true);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->job->params().prompt[1], 7);
  EXPECT_FALSE(first->located);
  std::optional<Release> second = fcfs->Next(false);  // Room gave it its slot already
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->job->params().prompt[1], 8);
  EXPECT_EQ(fcfs->size(), 0u);
  EXPECT_FALSE(fcfs->Next(true).has_value());
}

TEST(WaitingPolicyTest, FcfsCancelAllCancelsWhatItHolds) {
  auto fcfs = MakeWaitingPolicy(SchedulerKind::kFcfs, nullptr, 0, false);
  auto job = JobWith(1);
  fcfs->Arrive({job});
  fcfs->CancelAll();
  EXPECT_TRUE(job->cancelled());
  ASSERT_TRUE(fcfs->Next(false).has_value());  // released to be ended
}

}  // namespace
}  // namespace tierkv::sched

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
  fcfs->Arrive({JobWith(7), JobWith(8)});
  EXPECT_EQ(fcfs->size(), 2u);
  EXPECT_EQ(fcfs->Room(1, 4), 1u);  // the held jobs take their slots
  std::vector<Release> out = fcfs->Pick(3, false);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].job->params().prompt[1], 7);
  EXPECT_EQ(out[1].job->params().prompt[1], 8);
  EXPECT_FALSE(out[0].located);
  EXPECT_EQ(fcfs->size(), 0u);
  EXPECT_TRUE(fcfs->Pick(3, false).empty());
}

TEST(WaitingPolicyTest, FcfsCancelAllCancelsWhatItHolds) {
  auto fcfs = MakeWaitingPolicy(SchedulerKind::kFcfs, nullptr, 0, false);
  auto job = JobWith(1);
  fcfs->Arrive({job});
  fcfs->CancelAll();
  EXPECT_TRUE(job->cancelled());
  ASSERT_EQ(fcfs->Pick(0, true).size(), 1u);  // released to be ended
}

}  // namespace
}  // namespace tierkv::sched

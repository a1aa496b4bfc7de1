// CaR's shuffled window: jobs start by where their prefix is (pools, then
// nothing stored, then disk), oldest first within a class, and no job is
// passed over more than the window's size times.
#include "sched/car_window.h"

#include <gtest/gtest.h>

namespace tierkv::sched {
namespace {

using engine::PrefixPlace;

WindowEntry Entry(PrefixPlace p, int id) {
  GenerationParams g;
  g.prompt = {1, id};
  WindowEntry e;
  e.job = std::make_shared<Job>(g);
  e.where.place = p;
  return e;
}

int IdOf(const WindowEntry& e) { return e.job->params().prompt[1]; }

TEST(CarWindowTest, StartsByPlaceThenAge) {
  CarWindow w(8);
  w.Add(Entry(PrefixPlace::kDisk, 1));
  w.Add(Entry(PrefixPlace::kNone, 2));
  w.Add(Entry(PrefixPlace::kPools, 3));
  w.Add(Entry(PrefixPlace::kNone, 4));
  w.Add(Entry(PrefixPlace::kPools, 5));
  std::vector<int> order;
  for (size_t i : w.Order()) order.push_back(IdOf(w.entries()[i]));
  EXPECT_EQ(order, (std::vector<int>{3, 5, 2, 4, 1}));
  std::vector<int> taken;
  while (!w.empty()) taken.push_back(IdOf(w.Take(w.Pick())));
  EXPECT_EQ(taken, order);
}

TEST(CarWindowTest, AJobPassedOverWindowTimesStartsNext) {
  CarWindow w(3);
  w.Add(Entry(PrefixPlace::kDisk, 1));
  // Pool jobs keep arriving; each one that starts passes job 1.
  for (int id = 10; id < 13; ++id) {
    w.Add(Entry(PrefixPlace::kPools, id));
    const WindowEntry e = w.Take(w.Pick());
    EXPECT_EQ(IdOf(e), id);
  }
  EXPECT_EQ(w.entries()[0].passed, 3u);
  w.Add(Entry(PrefixPlace::kPools, 20));
  EXPECT_EQ(IdOf(w.Take(w.Pick())), 1) << "passed over window-size times: it goes first";
  EXPECT_EQ(IdOf(w.Take(w.Pick())), 20);
}

TEST(CarWindowTest, AJobWhosePrefetchIsRunningGoesAfterTheOthers) {
  CarWindow w(8);
  w.Add(Entry(PrefixPlace::kDisk, 1));
  w.entries()[0].loading = true;
  w.Add(Entry(PrefixPlace::kDisk, 2));
  w.Add(Entry(PrefixPlace::kNone, 3));
  std::vector<int> order;
  for (size_t i : w.Order()) order.push_back(IdOf(w.entries()[i]));
  EXPECT_EQ(order, (std::vector<int>{3, 2, 1}));
}

TEST(CarWindowTest, OnlyYoungerJobsStartingCountAsPassing) {
  CarWindow w(4);
  w.Add(Entry(PrefixPlace::kPools, 1));
  w.Add(Entry(PrefixPlace::kDisk, 2));
  EXPECT_EQ(IdOf(w.Take(w.Pick())), 1);  // older than 2: not a pass
  EXPECT_EQ(w.entries()[0].passed, 0u);
  EXPECT_FALSE(w.full());
}

}  // namespace
}  // namespace tierkv::sched

// OutputText without a model: what is streamed, held back and cut.
#include "sched/output_text.h"

#include <gtest/gtest.h>

namespace tierkv::sched {
namespace {

TEST(OutputTextTest, WithoutStopsEveryPieceIsReadyAtOnce) {
  const std::vector<std::string> stops;
  OutputText t(stops);
  EXPECT_FALSE(t.Append("Hello"));
  EXPECT_EQ(t.TakeReady(), "Hello");
  EXPECT_EQ(t.TakeReady(), "");
  EXPECT_FALSE(t.Append(", world"));
  EXPECT_EQ(t.TakeReady(), ", world");
  EXPECT_EQ(t.TakeRest(), "");
}

TEST(OutputTextTest, APossibleStopIsHeldBackThenCutAcrossPieces) {
  const std::vector<std::string> stops = {"\nUser:"};
  OutputText t(stops);
  EXPECT_FALSE(t.Append("Fine.\nU"));
  EXPECT_EQ(t.TakeReady(), "Fine.");  // "\nU" may begin the stop string
  EXPECT_FALSE(t.Append("se"));
  EXPECT_EQ(t.TakeReady(), "");
  EXPECT_TRUE(t.Append("r: more"));
  EXPECT_EQ(t.text(), "Fine.");
  EXPECT_EQ(t.TakeRest(), "");  // the stop string and what follows are never handed on
}

TEST(OutputTextTest, AHeldTailThatDoesNotBecomeAStopIsHandedOn) {
  const std::vector<std::string> stops = {"###", "\n\n"};
  OutputText t(stops);
  EXPECT_FALSE(t.Append("a ##"));
  EXPECT_EQ(t.TakeReady(), "a ");
  EXPECT_FALSE(t.Append(" b\n"));
  EXPECT_EQ(t.TakeReady(), "## b");  // "\n" may still begin "\n\n"
  EXPECT_EQ(t.TakeRest(), "\n");     // the end: nothing more can complete it
  EXPECT_EQ(t.TakeRest(), "");
}

TEST(OutputTextTest, TheEarliestOfSeveralStopsCuts) {
  const std::vector<std::string> stops = {"END", "."};
  OutputText t(stops);
  EXPECT_TRUE(t.Append("one. two END"));
  EXPECT_EQ(t.text(), "one");
  EXPECT_EQ(t.TakeRest(), "one");
}

}  // namespace
}  // namespace tierkv::sched

#include "engine/stop_matcher.h"

#include <gtest/gtest.h>

namespace icecache {
namespace {

TEST(StopMatcherTest, PassesTextWithoutStops) {
  StopMatcher m({});
  EXPECT_EQ(m.Push("hello "), "hello ");
  EXPECT_EQ(m.Push("world"), "world");
  EXPECT_EQ(m.Flush(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcherTest, StopsBeforeMatchAcrossPieces) {
  StopMatcher m({"END"});
  std::string out;
  out += m.Push("abc E");
  EXPECT_EQ(out, "abc ");  // "E" might start "END"
  out += m.Push("N");
  EXPECT_EQ(out, "abc ");
  out += m.Push("Dxyz");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "abc ");
  EXPECT_EQ(m.Push("more"), "");
}

TEST(StopMatcherTest, ReleasesFalseStartAndFlushesTail) {
  StopMatcher m({"END"});
  std::string out = m.Push("EN");
  EXPECT_EQ(out, "");
  out += m.Push("x");
  EXPECT_EQ(out, "ENx");
  out += m.Push("E");
  out += m.Flush();
  EXPECT_EQ(out, "ENxE");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcherTest, EarliestOfSeveralStops) {
  StopMatcher m({"world", "lo w"});
  EXPECT_EQ(m.Push("hello world"), "hel");
  EXPECT_TRUE(m.stopped());
}

}  // namespace
}  // namespace icecache

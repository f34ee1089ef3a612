#include "core/env_switch.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace icecache {
namespace {

constexpr const char* kName = "ICECACHE_TEST_ENV_SWITCH";

class EnvSwitchTest : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv(kName); }
  static void Set(const char* value) { ASSERT_EQ(setenv(kName, value, 1), 0); }
};

TEST_F(EnvSwitchTest, UnsetOrEmptyGivesTheDefault) {
  unsetenv(kName);
  EXPECT_TRUE(EnvSwitch(kName, true));
  EXPECT_FALSE(EnvSwitch(kName, false));
  Set("");
  EXPECT_TRUE(EnvSwitch(kName, true));
  EXPECT_FALSE(EnvSwitch(kName, false));
}

TEST_F(EnvSwitchTest, OnlyZeroTurnsADefaultOnSwitchOff) {
  Set("0");
  EXPECT_FALSE(EnvSwitch(kName, true));
  Set("1");
  EXPECT_TRUE(EnvSwitch(kName, true));
  Set("yes");
  EXPECT_TRUE(EnvSwitch(kName, true));
}

TEST_F(EnvSwitchTest, OnlyOneTurnsADefaultOffSwitchOn) {
  Set("1");
  EXPECT_TRUE(EnvSwitch(kName, false));
  Set("0");
  EXPECT_FALSE(EnvSwitch(kName, false));
  Set("yes");
  EXPECT_FALSE(EnvSwitch(kName, false));
}

TEST_F(EnvSwitchTest, IntegersFallBackWhenUnsetOrEmpty) {
  unsetenv(kName);
  EXPECT_EQ(EnvInt(kName, 8), 8);
  Set("");
  EXPECT_EQ(EnvInt(kName, 8), 8);
  Set("4");
  EXPECT_EQ(EnvInt(kName, 8), 4);
  Set("many");
  EXPECT_EQ(EnvInt(kName, 8), 0);
}

}  // namespace
}  // namespace icecache

// LogThrottle: at most N lines a second, and the count of the events left out reaches the next line.
#include "engine/base/log_throttle.h"

#include "gtest/gtest.h"

namespace scored {
namespace {

TEST(LogThrottleTest, AtMostNLinesASecondWithTheCountOfTheRest) {
  LogThrottle throttle(2);
  const LogThrottle::Clock::time_point t0 = LogThrottle::Clock::now();
  EXPECT_EQ(throttle.Admit(t0), 0);
  EXPECT_EQ(throttle.Admit(t0 + std::chrono::milliseconds(1)), 0);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(throttle.Admit(t0 + std::chrono::milliseconds(2 + i / 2)), -1);
  // A second later: a line again, saying how many were left out.
  EXPECT_EQ(throttle.Admit(t0 + std::chrono::milliseconds(1000)), 1000);
  EXPECT_EQ(throttle.Admit(t0 + std::chrono::milliseconds(1001)), 0);
  EXPECT_EQ(throttle.Admit(t0 + std::chrono::milliseconds(1002)), -1);
}

}  // namespace
}  // namespace scored

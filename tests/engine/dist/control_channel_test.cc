#include "engine/dist/control_channel.h"

#include "gtest/gtest.h"

namespace scored::dist {
namespace {

TEST(ControlChannelTest, LeaderRejectsSingleNode) {
  EXPECT_FALSE(ControlChannel::Leader("127.0.0.1:0", 1, "id").ok());
}

}  // namespace
}  // namespace scored::dist

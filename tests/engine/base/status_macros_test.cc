#include "engine/base/status_macros.h"

#include <string>

#include "gtest/gtest.h"

namespace scored {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd: " + std::to_string(x));
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  SCORED_ASSIGN_OR_RETURN(int h, Half(x));
  SCORED_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

absl::Status CheckEven(int x) {
  SCORED_RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusMacros, AssignOrReturnPropagatesValueAndError) {
  ASSERT_TRUE(Quarter(8).ok());
  EXPECT_EQ(*Quarter(8), 2);
  const absl::StatusOr<int> bad = Quarter(6);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "odd: 3");
}

TEST(StatusMacros, ReturnIfError) {
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(CheckEven(5).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace scored

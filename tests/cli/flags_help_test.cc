// GroupedHelp and WantsHelp (cli/flags_help.h) on flags defined here: groups in order, a flag no group
// lists under "Other flags", a listed name that is no flag marked, help wrapped at 100 columns.
#include "cli/flags_help.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(std::string, help_test_address, "127.0.0.1:1", "where to connect");
ABSL_FLAG(int32_t, help_test_count, 3, "how many");
ABSL_FLAG(bool, help_test_unlisted, false,
          "a flag that no group lists, with a help text long enough to need wrapping: lorem ipsum dolor sit "
          "amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna");

namespace scored::cli {
namespace {

using ::testing::HasSubstr;

TEST(GroupedHelpTest, GroupsInOrderThenOtherFlags) {
  const std::string help = GroupedHelp(
      "usage line",
      {{"Connection", {"help_test_address"}}, {"Work", {"help_test_count", "help_test_missing"}}}, __FILE__);
  EXPECT_EQ(help.rfind("usage line\n", 0), 0u);
  const size_t connection = help.find(
      "\nConnection:\n  --help_test_address (default: \"127.0.0.1:1\")\n"
      "      where to connect\n");
  const size_t work = help.find(
      "\nWork:\n  --help_test_count (default: 3)\n      how many\n"
      "  --help_test_missing (not a flag of this program)\n");
  const size_t other = help.find("\nOther flags:\n  --help_test_unlisted (default: false)\n");
  ASSERT_NE(connection, std::string::npos) << help;
  ASSERT_NE(work, std::string::npos) << help;
  ASSERT_NE(other, std::string::npos) << help;
  EXPECT_LT(connection, work);
  EXPECT_LT(work, other);
  // Flags of other files (absl's, GoogleTest's) are not this program's.
  EXPECT_THAT(help, ::testing::Not(HasSubstr("--flagfile (default")));
  for (absl::string_view line : absl::StrSplit(help, '\n')) EXPECT_LE(line.size(), 100u) << line;
  EXPECT_THAT(help, HasSubstr("      a flag that no group lists"));
}

TEST(WantsHelpTest, HelpSpellingsBeforeTheEndOfFlags) {
  auto wants = [](std::vector<const char*> args) {
    args.insert(args.begin(), "prog");
    return WantsHelp(static_cast<int>(args.size()), const_cast<char* const*>(args.data()));
  };
  EXPECT_TRUE(wants({"--help"}));
  EXPECT_TRUE(wants({"-help"}));
  EXPECT_TRUE(wants({"--x=1", "--helpshort"}));
  EXPECT_TRUE(wants({"--help=true"}));
  EXPECT_FALSE(wants({}));
  EXPECT_FALSE(wants({"--helpfull"}));  // absl's: every flag
  EXPECT_FALSE(wants({"--help=false"}));
  EXPECT_FALSE(wants({"--", "--help"}));
  EXPECT_FALSE(wants({"help"}));
}

}  // namespace
}  // namespace scored::cli

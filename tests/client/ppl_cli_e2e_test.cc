// The real scored-ppl binary's command line and data checks, no server needed (they come before it is
// contacted; --server points at a port nobody listens on): a bad command line (unknown flag, bad value,
// positional argument) exits 2 naming it, as the usage says; a --data that is a device, a directory, too
// large or not UTF-8 exits 1 at once naming the problem. Before: unknown flags exited 1, positional
// arguments were ignored, /dev/zero was read forever and a directory scored as empty text.
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"

namespace scored {
namespace ppl {
namespace {

using ::testing::HasSubstr;

using testing::ChildRun;

// Runs scored-ppl with `args`, killing it after `bound`.
ChildRun RunPpl(const std::vector<std::string>& args, absl::Duration bound = absl::Seconds(60)) {
  std::vector<std::string> argv = {std::string(SCORED_BINARY_DIR) + "/client/ppl/scored-ppl"};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::RunToExit(argv, absl::StrCat(::testing::TempDir(), "/ppl_cli_e2e.", ::getpid()), bound);
}

std::string WikiTest() { return std::string(SCORED_DATA_DIR) + "/wikitext-2-raw/wiki.test.raw"; }

// Port 1 on loopback: nobody listens there (a run that got past the checks fails with UNAVAILABLE).
const char kNoServer[] = "--server=127.0.0.1:1";

TEST(PplCliTest, BadCommandLineExitsTwoNamingIt) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--bogus_flag=1", "--data=" + WikiTest()}, "unknown flag --bogus_flag"},
      {{"--data=" + WikiTest(), "--ctx=abc"}, "--ctx: Illegal value 'abc'"},
      {{"--data=" + WikiTest(), "--quiet=maybe"}, "--quiet: Illegal value 'maybe'"},
      {{"--data=" + WikiTest(), "--noquiet=1"}, "--noquiet takes no value"},
      {{"--data=" + WikiTest(), "--method"}, "--method needs a value"},
      {{"--data=" + WikiTest(), "extra.raw"}, "unexpected argument 'extra.raw'"},
      {{"--data", WikiTest(), "a", "b"}, "unexpected arguments 'a' 'b'"},
      {{"--data=" + WikiTest(), "--", "--ctx=5"}, "unexpected argument '--ctx=5'"},
      {{"--data=" + WikiTest(), "--max_data_bytes=0"}, "--max_data_bytes must be >= 1"},
      {{"--method=exl3"}, "--data FILE is required"},
      {{"--data=" + WikiTest(), "--journal=/dev/zero"},
       "--journal /dev/zero is not a regular file (a directory, device, FIFO or socket)"},
      {{"--data=" + WikiTest(), "--method=hf", "--ctx=512", "--stride=1024"},
       "--stride 1024 is larger than --ctx 512: the tokens between windows would never be scored"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> full = {kNoServer};  // first: the cases end in what they test
    full.insert(full.end(), args.begin(), args.end());
    const ChildRun run = RunPpl(full);
    EXPECT_EQ(run.exit_code, 2) << absl::StrJoin(args, " ") << "\n" << run.err;
    EXPECT_THAT(run.err, HasSubstr(message)) << absl::StrJoin(args, " ");
  }
}

TEST(PplCliTest, DataMustBeARegularUtf8FileBelowTheLimit) {
  const std::string bad_utf8 = absl::StrCat(::testing::TempDir(), "/ppl_cli_bad_utf8.", ::getpid(), ".txt");
  {
    std::ofstream out(bad_utf8, std::ios::binary | std::ios::trunc);
    out << "Hello world.\nna\xefve\n";
  }
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--data=/dev/zero"}, "data file /dev/zero is a character device"},
      {{"--data=" + ::testing::TempDir()}, "is a directory"},
      {{"--data=" + WikiTest(), "--max_data_bytes=1000"}, "more than --max_data_bytes 1000"},
      {{"--data=" + bad_utf8}, "not valid UTF-8: invalid byte sequence at byte offset 15 (byte 0xef)"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> full = {kNoServer};  // first: the cases end in what they test
    full.insert(full.end(), args.begin(), args.end());
    // /dev/zero used to be read until memory ran out; 60 s bounds that, and a check takes milliseconds.
    const ChildRun run = RunPpl(full);
    EXPECT_EQ(run.exit_code, 1) << absl::StrJoin(args, " ") << "\n" << run.err;
    EXPECT_THAT(run.err, HasSubstr(message)) << absl::StrJoin(args, " ");
    EXPECT_LT(run.took, absl::Seconds(30)) << absl::StrJoin(args, " ");
  }
  // A good file passes the checks and only then meets the missing server.
  const ChildRun good = RunPpl({"--data=" + WikiTest(), kNoServer, "--connect_timeout_s=1"});
  EXPECT_EQ(good.exit_code, 1) << good.err;
  EXPECT_THAT(good.err, HasSubstr("UNAVAILABLE")) << good.err;
}

}  // namespace
}  // namespace ppl
}  // namespace scored

// Every installed binary's --help and --version, run as a user would. Before: --help printed "No flags
// matched." (absl's default filter looks for flags in a file named after the program), scored-ppl's help
// cited a DESIGN.md that is not in the repository, and the clients' --version printed no version.
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "cli/version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"

namespace scored::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

struct Binary {
  const char* name;
  const char* path;  // under the build folder
  std::vector<const char*> groups;
  std::vector<const char*> flags;
};

const std::vector<Binary>& Binaries() {
  static const auto* const binaries = new std::vector<Binary>{
      {"scored",
       "/server/scored",
       {"Model:", "Serving:", "Limits:", "TLS and authentication:", "Tensor parallelism (cuda):",
        "Distributed (several processes):", "Testing:"},
       {"--model", "--listen", "--metrics_listen", "--max_queue", "--max_batch_tokens", "--tls_cert",
        "--auth_token_file", "--nnodes", "--rendezvous", "--tp", "--shutdown_grace_s"}},
      {"scored-ppl",
       "/client/ppl/scored-ppl",
       {"Data:", "Method:", "Server connection:", "TLS and authentication:", "Output:", "Resume:"},
       {"--data", "--method", "--ctx", "--stride", "--server", "--tls_ca", "--json", "--journal", "--kld"}},
      {"scored-load",
       "/client/load/scored-load",
       {"Server connection:", "Load shape:", "Request contents:", "Output:"},
       {"--server", "--mode", "--concurrency", "--duration", "--requests", "--lengths", "--json"}},
  };
  return *binaries;
}

testing::ChildRun RunBinary(const Binary& binary, const std::string& arg) {
  return testing::RunToExit({std::string(SCORED_BINARY_DIR) + binary.path, arg},
                            absl::StrCat(::testing::TempDir(), "/cli_help.", binary.name, ".", ::getpid()),
                            absl::Seconds(60));
}

TEST(CliHelpTest, HelpListsTheProgramsFlagsGroupedByPurpose) {
  for (const Binary& binary : Binaries()) {
    SCOPED_TRACE(binary.name);
    for (const char* arg : {"--help", "-help", "--helpshort"}) {
      const testing::ChildRun run = RunBinary(binary, arg);
      EXPECT_EQ(run.exit_code, 0) << arg << "\n" << run.err;
      EXPECT_THAT(run.out, Not(HasSubstr("No flags matched"))) << arg;
      EXPECT_THAT(run.out, Not(HasSubstr("not a flag of this program"))) << arg;
      // Every flag is in a named group.
      EXPECT_THAT(run.out, Not(HasSubstr("Other flags:"))) << arg;
      for (absl::string_view line : absl::StrSplit(run.out, '\n')) EXPECT_LE(line.size(), 100u) << line;
      for (const char* group : binary.groups) {
        EXPECT_THAT(run.out, HasSubstr(absl::StrCat("\n", group, "\n"))) << arg;
      }
      for (const char* flag : binary.flags) {
        EXPECT_THAT(run.out, HasSubstr(absl::StrCat("\n  ", flag, " (default: "))) << arg;
      }
    }
  }
}

TEST(CliHelpTest, HelpNamesOnlyFilesOfTheRepository) {
  // A path-like word ending in a source or document extension: README.md, client/ppl/windows.h, ...
  const std::regex file_word(R"(([A-Za-z0-9_./-]+\.(md|h|cc|proto|py|yaml|service|toml)))");
  for (const Binary& binary : Binaries()) {
    SCOPED_TRACE(binary.name);
    const testing::ChildRun run = RunBinary(binary, "--help");
    ASSERT_EQ(run.exit_code, 0) << run.err;
    int named = 0;
    for (std::sregex_iterator it(run.out.begin(), run.out.end(), file_word), end; it != end; ++it) {
      const std::string file = (*it)[1].str();
      if (file.find('*') != std::string::npos) continue;
      ++named;
      EXPECT_TRUE(std::filesystem::exists(std::string(SCORED_SOURCE_DIR) + "/" + file))
          << binary.name << "'s --help names " << file << ", which is not in the repository";
    }
    if (std::string(binary.name) == "scored-ppl") {
      EXPECT_GE(named, 2);  // README.md, client/ppl/windows.h
    }
  }
}

TEST(CliVersionTest, VersionPrintsTheProjectVersionAndCommit) {
  ASSERT_THAT(std::string(ProjectVersion()), ::testing::MatchesRegex(R"([0-9]+\.[0-9]+\.[0-9]+)"));
  for (const Binary& binary : Binaries()) {
    SCOPED_TRACE(binary.name);
    const testing::ChildRun run = RunBinary(binary, "--version");
    EXPECT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(run.out, VersionLine(binary.name));
    EXPECT_THAT(run.out, StartsWith(absl::StrCat(binary.name, " ", ProjectVersion())));
    const std::string commit = GitCommit();
    if (!commit.empty()) {
      EXPECT_THAT(run.out, HasSubstr(absl::StrCat("(git ", commit, ")")));
    }
  }
}

// A bad command line exits 2 in every binary, naming the problem and a likely flag (before: scored exited 1
// with absl's bare "Unknown command line flag 'modle'", its positional model path said nothing of --model,
// and vLLM's / llama.cpp's spellings got no hint).
TEST(CliCommandLineTest, BadCommandLinesExitTwoWithAHint) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"/server/scored", "--modle=/m"}, "unknown flag --modle: did you mean --model?"},
      {{"/server/scored", "--max-seq-len=512"}, "flags are spelled with underscores: --max_seq_len"},
      {{"/server/scored", "--tensor-parallel-size", "2"}, "this program's flag for that is --tp"},
      {{"/server/scored", "/models/llama"},
       "unexpected argument '/models/llama' (scored takes only flags: the "
       "model is --model DIR)"},
      {{"/server/scored", "--max_queue=abc"}, "--max_queue: Illegal value 'abc'"},
      {{"/client/ppl/scored-ppl", "--ctx-size=512"}, "this program's flag for that is --ctx"},
      {{"/client/ppl/scored-ppl", "--metod=gptq"}, "did you mean --method?"},
      {{"/client/load/scored-load", "--sever=127.0.0.1:1"}, "did you mean --server?"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> argv = {std::string(SCORED_BINARY_DIR) + args[0]};
    argv.insert(argv.end(), args.begin() + 1, args.end());
    const testing::ChildRun run = testing::RunToExit(
        argv, absl::StrCat(::testing::TempDir(), "/cli_bad.", ::getpid()), absl::Seconds(60));
    EXPECT_EQ(run.exit_code, 2) << args[0] << " " << args[1] << "\n" << run.err;
    EXPECT_THAT(run.err, HasSubstr(message)) << args[0] << " " << args[1];
  }
}

}  // namespace
}  // namespace scored::cli

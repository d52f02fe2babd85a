// End-to-end faults of scored-ppl (--journal, retries) against the real `scored` daemon (CPU backend,
// stories260K-hf) on WikiText-2 test, chunks, ctx 512, the first 300 windows (with SCORED_E2E_MAX_WINDOWS=K
// set, as the sanitizer build does, max(K, 40) windows: the kills still land after 20 journaled windows):
//   - the daemon is killed (-9) mid-run and restarted on the same port: the client waits, re-sends the
//     unfinished windows and its final report equals an uninterrupted run's;
//   - the client is killed (-9) mid-run and rerun with the same journal: the rerun skips the journaled
//     windows and its report equals an uninterrupted run's; its throughput (tokens_per_second) counts only
//     the windows it scored itself, not those taken from the journal.
// "Equals" is bitwise for every result number (the report aggregates in window-index order and the
// journal stores exact decimal forms), so no tolerance is needed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/child_process.h"
#include "tests/e2e_windows.h"
#include "tests/server/scored_process.h"

namespace scored {
namespace ppl {
namespace {

// Upper bound of one client run (or of reaching a journal size). A run takes ~10 s in a release build and up
// to ~2 min in the sanitizer build on 2 busy cores; the bound only decides when a hung run fails.
constexpr absl::Duration kRunBound = absl::Seconds(300);

// Windows of every run: 300, or max(SCORED_E2E_MAX_WINDOWS, 40) when that is set (slow sanitizer builds).
int64_t NumWindows() {
  const int64_t k = ::scored::testing::MaxWindowsFromEnv();
  return k > 0 ? std::max<int64_t>(k, 40) : 300;
}

using testing::ReadText;

int64_t CountLines(const std::string& path) {
  const std::string text = ReadText(path);
  int64_t n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

// A port nobody listens on now (bound then released; the daemon reuses it right after).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

absl::StatusOr<std::unique_ptr<testing::ScoredProcess>> StartDaemon(int port) {
  testing::ScoredProcessOptions options;
  options.args = {"--model=" + testing::StoriesModelDir(), "--backend=cpu",
                  absl::StrCat("--listen=127.0.0.1:", port)};
  return testing::ScoredProcess::Start(options);
}

// scored-ppl as a child process (stdout/stderr to files); null (and a test failure) if it cannot start.
std::unique_ptr<testing::ChildProcess> SpawnPpl(const std::vector<std::string>& args,
                                                const std::string& out_path, const std::string& err_path) {
  std::vector<std::string> argv = {std::string(SCORED_BINARY_DIR) + "/client/ppl/scored-ppl"};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<std::unique_ptr<testing::ChildProcess>> child =
      testing::ChildProcess::Spawn(argv, out_path, err_path);
  EXPECT_TRUE(child.ok()) << child.status();
  return child.ok() ? *std::move(child) : nullptr;
}

// Runs scored-ppl to its end: its exit code, or -1 (killed) when still running after kRunBound.
int RunPpl(const std::vector<std::string>& args, const std::string& out_path, const std::string& err_path) {
  std::unique_ptr<testing::ChildProcess> child = SpawnPpl(args, out_path, err_path);
  return child != nullptr ? child->Wait(kRunBound) : -1;
}

// Waits (on the journal's writes, no polling) until it holds at least `records` records (header excluded);
// false if the child exits first or kRunBound passes.
bool WaitForRecords(testing::ChildProcess& child, const std::string& journal, int64_t records) {
  return child
      .WaitFor(
          journal, [&] { return CountLines(journal) - 1 >= records; }, kRunBound)
      .ok();
}

std::vector<std::string> PplArgs(int port, const std::string& json_path) {
  return {absl::StrCat("--server=127.0.0.1:", port),
          std::string("--data=") + SCORED_DATA_DIR + "/wikitext-2-raw/wiki.test.raw",
          "--method=chunks",
          "--ctx=512",
          absl::StrCat("--max_windows=", NumWindows()),
          "--inflight=2",
          "--quiet",
          "--json=" + json_path};
}

void ExpectSameResults(const nlohmann::json& got, const nlohmann::json& want) {
  for (const char* key : {"ppl", "nll_mean", "nll_stderr", "bits_per_byte", "sum_logprob"}) {
    ASSERT_TRUE(got[key].is_number()) << key;
    // Bitwise: the same doubles (JSON holds their shortest exact decimal forms).
    EXPECT_EQ(got[key].get<double>(), want[key].get<double>()) << key;
  }
  for (const char* key : {"num_scored", "num_windows", "num_bytes", "num_tokens_sent"}) {
    EXPECT_EQ(got[key].get<int64_t>(), want[key].get<int64_t>()) << key;
  }
  EXPECT_EQ(got["num_windows"].get<int64_t>(), NumWindows());
}

// Throughput counts this run's windows only: num_windows_resumed came from the journal, and
// tokens_per_second = num_tokens_sent_this_run / score_seconds.
void ExpectThisRunsThroughput(const nlohmann::json& report, int64_t windows_resumed) {
  EXPECT_EQ(report["num_windows_resumed"].get<int64_t>(), windows_resumed);
  const int64_t sent = report["num_tokens_sent"].get<int64_t>();
  const int64_t this_run = report["num_tokens_sent_this_run"].get<int64_t>();
  const int64_t windows = report["num_windows"].get<int64_t>();
  // Every window here is ctx (512) tokens long, so the tokens follow from the windows.
  EXPECT_EQ(sent, windows * 512);
  EXPECT_EQ(this_run, (windows - windows_resumed) * 512);
  const double seconds = report["score_seconds"].get<double>();
  const double rate = report["tokens_per_second"].get<double>();
  if (this_run == 0) {
    EXPECT_EQ(rate, 0.0) << "nothing was scored by this run";
  } else {
    ASSERT_GT(seconds, 0.0);
    EXPECT_NEAR(rate, static_cast<double>(this_run) / seconds, 1e-6 * rate);
  }
}

// One daemon and one uninterrupted baseline run for the suite (the daemon test replaces the daemon).
class PplResumeE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    port_ = FreePort();
    if (port_ <= 0) return;
    auto daemon = StartDaemon(port_);
    if (!daemon.ok()) {
      *setup_error_ = daemon.status().ToString();
      return;
    }
    daemon_ = daemon->release();
    // Per process: other runs of these tests on the machine must not share the journals and reports.
    dir_ = new std::string(absl::StrCat(::testing::TempDir(), "/ppl_resume_", ::getpid()));
    ::mkdir(dir_->c_str(), 0755);
    // The uninterrupted run every interrupted one must equal.
    const std::string base_json = *dir_ + "/ppl_resume_base.json";
    const std::string base_err = *dir_ + "/ppl_resume_base.err";
    std::remove(base_json.c_str());
    if (RunPpl(PplArgs(port_, base_json), *dir_ + "/ppl_resume_base.out", base_err) != 0) {
      *setup_error_ = "baseline run failed: " + ReadText(base_err);
      return;
    }
    base_ = new nlohmann::json(nlohmann::json::parse(ReadText(base_json)));
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
    delete base_;
    base_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(daemon_, nullptr) << "scored did not start: " << *setup_error_;
    ASSERT_NE(base_, nullptr) << *setup_error_;
  }

  static inline int port_ = 0;
  static inline testing::ScoredProcess* daemon_ = nullptr;
  static inline std::string* dir_ = nullptr;
  static inline nlohmann::json* base_ = nullptr;
  static inline std::string* setup_error_ = new std::string("port");
};

TEST_F(PplResumeE2eTest, DaemonKilledAndRestartedOnTheSamePort) {
  const std::string journal = *dir_ + "/ppl_resume_daemon.journal";
  const std::string json = *dir_ + "/ppl_resume_daemon.json";
  const std::string err = *dir_ + "/ppl_resume_daemon.err";
  std::remove(journal.c_str());
  std::vector<std::string> args = PplArgs(port_, json);
  args.push_back("--journal=" + journal);
  std::unique_ptr<testing::ChildProcess> ppl = SpawnPpl(args, *dir_ + "/ppl_resume_daemon.out", err);
  ASSERT_NE(ppl, nullptr);
  ASSERT_TRUE(WaitForRecords(*ppl, journal, 20)) << ReadText(err);
  ASSERT_TRUE(daemon_->SendSignal(SIGKILL).ok());
  auto code = daemon_->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  const int64_t at_kill = CountLines(journal) - 1;
  EXPECT_LT(at_kill, NumWindows()) << "the run finished before the daemon was killed";
  delete daemon_;
  daemon_ = nullptr;
  // The restart comes once the client has seen the server gone and started waiting for it.
  ASSERT_TRUE(
      ppl->WaitFor(
             err, [&] { return ReadText(err).find("waiting for server") != std::string::npos; }, kRunBound)
          .ok())
      << ReadText(err);
  auto restarted = StartDaemon(port_);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  daemon_ = restarted->release();

  ASSERT_EQ(ppl->Wait(kRunBound), 0) << ReadText(err);
  EXPECT_NE(ReadText(err).find("waiting for server"), std::string::npos) << ReadText(err);
  EXPECT_EQ(CountLines(journal) - 1, NumWindows());
  ExpectSameResults(nlohmann::json::parse(ReadText(json)), *base_);
  std::printf("[ measured ] daemon killed after %lld of %lld windows journaled\n",
              static_cast<long long>(at_kill), static_cast<long long>(NumWindows()));
}

// Ctrl-C (SIGINT) mid-run: exit 130 with a line saying how far the run got and that the journal resumes it.
TEST_F(PplResumeE2eTest, InterruptSaysHowToResume) {
  const std::string journal = *dir_ + "/ppl_resume_interrupt.journal";
  const std::string err = *dir_ + "/ppl_resume_interrupt.err";
  std::remove(journal.c_str());
  std::vector<std::string> args = PplArgs(port_, *dir_ + "/ppl_resume_interrupt.json");
  args.push_back("--journal=" + journal);
  std::unique_ptr<testing::ChildProcess> run = SpawnPpl(args, *dir_ + "/ppl_resume_interrupt.out", err);
  ASSERT_NE(run, nullptr);
  ASSERT_TRUE(WaitForRecords(*run, journal, 5)) << ReadText(err);
  run->Kill(SIGINT);
  EXPECT_EQ(run->Wait(absl::Seconds(30)), 128 + SIGINT) << ReadText(err);
  EXPECT_NE(ReadText(err).find("scored-ppl: interrupted after "), std::string::npos) << ReadText(err);
  EXPECT_NE(ReadText(err).find("they are in the journal " + journal + ": rerun the same command to resume"),
            std::string::npos)
      << ReadText(err);
}

TEST_F(PplResumeE2eTest, ClientKilledAndRerunWithTheJournal) {
  const std::string journal = *dir_ + "/ppl_resume_client.journal";
  const std::string json = *dir_ + "/ppl_resume_client.json";
  const std::string err = *dir_ + "/ppl_resume_client.err";
  std::remove(journal.c_str());
  std::remove(json.c_str());
  std::vector<std::string> args = PplArgs(port_, json);
  args.push_back("--journal=" + journal);
  std::unique_ptr<testing::ChildProcess> first = SpawnPpl(args, *dir_ + "/ppl_resume_client.out", err);
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(WaitForRecords(*first, journal, 20)) << ReadText(err);
  first->Kill(SIGKILL);
  EXPECT_EQ(first->Wait(absl::Seconds(30)), 128 + SIGKILL);
  const int64_t at_kill = CountLines(journal) - 1;
  EXPECT_LT(at_kill, NumWindows()) << "the run finished before the client was killed";

  ASSERT_EQ(RunPpl(args, *dir_ + "/ppl_resume_client2.out", err), 0) << ReadText(err);
  EXPECT_NE(ReadText(err).find("resuming from journal"), std::string::npos) << ReadText(err);
  EXPECT_EQ(CountLines(journal) - 1, NumWindows());
  ExpectSameResults(nlohmann::json::parse(ReadText(json)), *base_);
  ExpectThisRunsThroughput(nlohmann::json::parse(ReadText(json)), at_kill);
  ExpectThisRunsThroughput(*base_, 0);

  // Another run's arguments against this journal: refused, naming the differing field.
  std::vector<std::string> other = args;
  other[3] = "--ctx=256";
  EXPECT_EQ(RunPpl(other, *dir_ + "/ppl_resume_client3.out", err), 1);
  EXPECT_NE(ReadText(err).find("field 'ctx'"), std::string::npos) << ReadText(err);
  std::printf("[ measured ] client killed after %lld of %lld windows journaled\n",
              static_cast<long long>(at_kill), static_cast<long long>(NumWindows()));
}

// The journal identifies the data file by its bytes (SHA-256), not its timestamp: a touched copy resumes
// (here the finished journal: nothing left to score), an edit of the same size is refused naming data_sha256.
TEST_F(PplResumeE2eTest, DataFileIdentityIsItsContent) {
  const std::string data = *dir_ + "/ppl_resume_data.raw";
  const std::string journal = *dir_ + "/ppl_resume_data.journal";
  const std::string json = *dir_ + "/ppl_resume_data.json";
  const std::string err = *dir_ + "/ppl_resume_data.err";
  std::string text = ReadText(std::string(SCORED_DATA_DIR) + "/wikitext-2-raw/wiki.test.raw");
  ASSERT_GT(text.size(), 1000u);
  auto write = [&](const std::string& bytes) {
    std::ofstream out(data, std::ios::binary | std::ios::trunc);
    out << bytes;
  };
  write(text);
  std::remove(journal.c_str());
  std::vector<std::string> args = {absl::StrCat("--server=127.0.0.1:", port_),
                                   "--data=" + data,
                                   "--method=chunks",
                                   "--ctx=512",
                                   "--max_windows=20",
                                   "--inflight=2",
                                   "--quiet",
                                   "--json=" + json,
                                   "--journal=" + journal};
  ASSERT_EQ(RunPpl(args, *dir_ + "/ppl_resume_data.out", err), 0) << ReadText(err);
  ASSERT_EQ(CountLines(journal) - 1, 20);

  // Same bytes, new modification time (rewritten, then dated a minute later).
  write(text);
  std::filesystem::last_write_time(data, std::filesystem::last_write_time(data) + std::chrono::minutes(1));
  ASSERT_EQ(RunPpl(args, *dir_ + "/ppl_resume_data2.out", err), 0) << ReadText(err);
  EXPECT_NE(ReadText(err).find("resuming from journal"), std::string::npos) << ReadText(err);
  // Every window came from the journal: no throughput (it was all 20 windows' tokens over ~0 s).
  ExpectThisRunsThroughput(nlohmann::json::parse(ReadText(json)), 20);

  // One byte changed, same size.
  text[text.size() / 2] = text[text.size() / 2] == 'x' ? 'y' : 'x';
  write(text);
  EXPECT_EQ(RunPpl(args, *dir_ + "/ppl_resume_data3.out", err), 1);
  EXPECT_NE(ReadText(err).find("field 'data_sha256'"), std::string::npos) << ReadText(err);
}

}  // namespace
}  // namespace ppl
}  // namespace scored

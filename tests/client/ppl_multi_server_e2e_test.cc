// scored-ppl over several real `scored` daemons (CPU backend, stories260K-hf) on 127.0.0.1:0, WikiText-2
// test, chunks, ctx 512, the first 300 windows (max(SCORED_E2E_MAX_WINDOWS, 40) when that is set):
//   - two servers (a comma list, one of them as dns:///) give the same report as one server, bit for bit, and
//     both served windows;
//   - a second server with another model is refused before scoring, naming the server and the field;
//   - a server SIGKILLed after it answered its first window: its unanswered windows go to the other server
//     (a line names it), and the report still equals the one-server run;
//   - both servers SIGKILLed mid-run: the run fails (exit 1) saying that every server failed;
//   - a server that does not answer at start is refused naming its address.
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/child_process.h"
#include "tests/e2e_windows.h"
#include "tests/server/scored_process.h"

namespace scored {
namespace ppl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Upper bound of one client run (~10 s in a release build on 2 busy cores); it only decides when a hung run
// fails.
constexpr absl::Duration kRunBound = absl::Seconds(300);

int64_t NumWindows() {
  const int64_t k = ::scored::testing::MaxWindowsFromEnv();
  return k > 0 ? std::max<int64_t>(k, 40) : 300;
}

std::unique_ptr<testing::ScoredProcess> StartDaemon(const std::string& model_dir) {
  testing::ScoredProcessOptions options;
  options.args = {"--model=" + model_dir, "--backend=cpu"};
  auto p = testing::ScoredProcess::Start(options);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "ppl_multi_", ::getpid(), "_", name);
}

std::vector<std::string> PplArgv(const std::string& servers, const std::string& json_path) {
  return {std::string(SCORED_BINARY_DIR) + "/client/ppl/scored-ppl",
          "--server=" + servers,
          std::string("--data=") + SCORED_DATA_DIR + "/wikitext-2-raw/wiki.test.raw",
          "--method=chunks",
          "--ctx=512",
          absl::StrCat("--max_windows=", NumWindows()),
          "--inflight=2",
          "--quiet",
          "--json=" + json_path};
}

nlohmann::json ReadJson(const std::string& path) {
  return nlohmann::json::parse(testing::ReadText(path), nullptr, false);
}

void ExpectSameResults(const nlohmann::json& got, const nlohmann::json& want) {
  ASSERT_TRUE(got.is_object() && want.is_object());
  for (const char* key : {"ppl", "ppl_stderr", "nll_mean", "nll_stderr", "bits_per_byte", "sum_logprob"}) {
    ASSERT_TRUE(got[key].is_number()) << key;
    EXPECT_EQ(got[key].get<double>(), want[key].get<double>()) << key;  // bitwise: window-order aggregation
  }
  for (const char* key : {"num_scored", "num_windows", "num_bytes", "num_tokens_sent"}) {
    EXPECT_EQ(got[key].get<int64_t>(), want[key].get<int64_t>()) << key;
  }
  EXPECT_EQ(got["model_fingerprint"], want["model_fingerprint"]);
  EXPECT_EQ(got["num_windows"].get<int64_t>(), NumWindows());
}

// The number after "ADDR " in the client's "windows per server: A n, B m" line (-1 if absent).
int64_t WindowsServedBy(const std::string& err, const std::string& address) {
  const size_t line = err.find("windows per server: ");
  if (line == std::string::npos) return -1;
  const size_t at = err.find(address + " ", line);
  if (at == std::string::npos) return -1;
  return std::strtoll(err.c_str() + at + address.size() + 1, nullptr, 10);
}

class PplMultiServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    a_ = StartDaemon(testing::StoriesModelDir()).release();
    b_ = StartDaemon(testing::StoriesModelDir()).release();
  }
  static void TearDownTestSuite() {
    delete a_;
    delete b_;
  }
  void SetUp() override { ASSERT_TRUE(a_ != nullptr && b_ != nullptr) << "scored did not start"; }

  // The one-server report (server A), made once.
  static const nlohmann::json& OneServerReport() {
    static const nlohmann::json* report = [] {
      const std::string json = TempPath("one.json");
      const testing::ChildRun run = testing::RunToExit(PplArgv(a_->grpc_address(), json), json, kRunBound);
      EXPECT_EQ(run.exit_code, 0) << run.err;
      return new nlohmann::json(ReadJson(json));
    }();
    return *report;
  }

  static testing::ScoredProcess* a_;
  static testing::ScoredProcess* b_;
};

testing::ScoredProcess* PplMultiServerTest::a_ = nullptr;
testing::ScoredProcess* PplMultiServerTest::b_ = nullptr;

TEST_F(PplMultiServerTest, TwoServersGiveTheOneServerReport) {
  const nlohmann::json& one = OneServerReport();
  const std::string json = TempPath("two.json");
  // B named through the dns:/// form (a numeric name resolves offline).
  const std::string servers = absl::StrCat(a_->grpc_address(), ",dns:///127.0.0.1:", b_->grpc_port());
  const testing::ChildRun run = testing::RunToExit(PplArgv(servers, json), json, kRunBound);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ExpectSameResults(ReadJson(json), one);
  // Both servers worked, and together they answered every window exactly once.
  const int64_t on_a = WindowsServedBy(run.err, a_->grpc_address());
  const int64_t on_b = WindowsServedBy(run.err, b_->grpc_address());
  EXPECT_GT(on_a, 0) << run.err;
  EXPECT_GT(on_b, 0) << run.err;
  EXPECT_EQ(on_a + on_b, NumWindows()) << run.err;
  EXPECT_THAT(run.err, Not(HasSubstr("failed")));
}

TEST_F(PplMultiServerTest, AnotherModelIsRefusedNamingServerAndField) {
  std::unique_ptr<testing::ScoredProcess> other =
      StartDaemon(std::string(SCORED_FIXTURES_DIR) + "/stories260k-w4a16-channel");
  ASSERT_NE(other, nullptr);
  const std::string json = TempPath("mismatch.json");
  const testing::ChildRun run = testing::RunToExit(
      PplArgv(absl::StrCat(a_->grpc_address(), ",", other->grpc_address()), json), json, kRunBound);
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_THAT(run.err, HasSubstr(absl::StrCat("server ", other->grpc_address(), " differs from ",
                                              a_->grpc_address(), " in model_fingerprint")));
  EXPECT_THAT(run.err, Not(HasSubstr("answered its first window")));  // refused before any window
}

TEST_F(PplMultiServerTest, UnreachableServerIsRefusedAtStart) {
  // Port 1 (privileged): nothing listens there, the connection is refused.
  const std::string json = TempPath("unreachable.json");
  std::vector<std::string> argv = PplArgv(absl::StrCat(a_->grpc_address(), ",127.0.0.1:1"), json);
  argv.push_back("--connect_timeout_s=2");
  const testing::ChildRun run = testing::RunToExit(argv, json, kRunBound);
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_THAT(run.err, HasSubstr("cannot connect to scored at 127.0.0.1:1"));
}

TEST_F(PplMultiServerTest, KilledServerWindowsMoveToTheOther) {
  const nlohmann::json& one = OneServerReport();
  std::unique_ptr<testing::ScoredProcess> c = StartDaemon(testing::StoriesModelDir());
  std::unique_ptr<testing::ScoredProcess> d = StartDaemon(testing::StoriesModelDir());
  ASSERT_TRUE(c != nullptr && d != nullptr);
  const std::string json = TempPath("kill.json");
  const std::string err = TempPath("kill.err");
  auto ppl = testing::ChildProcess::Spawn(
      PplArgv(absl::StrCat(c->grpc_address(), ",", d->grpc_address()), json), TempPath("kill.out"), err);
  ASSERT_TRUE(ppl.ok()) << ppl.status();
  // D has answered a window (and holds more): kill it.
  const std::string first = absl::StrCat("server ", d->grpc_address(), " answered its first window");
  ASSERT_TRUE((*ppl)
                  ->WaitFor(
                      err, [&] { return testing::ReadText(err).find(first) != std::string::npos; }, kRunBound)
                  .ok())
      << testing::ReadText(err);
  ASSERT_TRUE(d->SendSignal(SIGKILL).ok());
  ASSERT_EQ((*ppl)->Wait(kRunBound), 0) << testing::ReadText(err);
  const std::string text = testing::ReadText(err);
  EXPECT_THAT(text, HasSubstr(absl::StrCat("server ", d->grpc_address(), " failed (")));
  EXPECT_THAT(text, HasSubstr("unanswered windows on the 1 server(s) left"));
  ExpectSameResults(ReadJson(json), one);
  EXPECT_GT(WindowsServedBy(text, d->grpc_address()), 0) << text;
  EXPECT_GT(WindowsServedBy(text, c->grpc_address()), 0) << text;
}

TEST_F(PplMultiServerTest, RunFailsOnlyWhenNoServerIsLeft) {
  std::unique_ptr<testing::ScoredProcess> c = StartDaemon(testing::StoriesModelDir());
  std::unique_ptr<testing::ScoredProcess> d = StartDaemon(testing::StoriesModelDir());
  ASSERT_TRUE(c != nullptr && d != nullptr);
  const std::string json = TempPath("all.json");
  const std::string err = TempPath("all.err");
  auto ppl = testing::ChildProcess::Spawn(
      PplArgv(absl::StrCat(c->grpc_address(), ",", d->grpc_address()), json), TempPath("all.out"), err);
  ASSERT_TRUE(ppl.ok()) << ppl.status();
  const std::string first_d = absl::StrCat("server ", d->grpc_address(), " answered its first window");
  ASSERT_TRUE(
      (*ppl)
          ->WaitFor(
              err, [&] { return testing::ReadText(err).find(first_d) != std::string::npos; }, kRunBound)
          .ok())
      << testing::ReadText(err);
  ASSERT_TRUE(d->SendSignal(SIGKILL).ok());
  // C takes D's windows (the line says so), then C goes too.
  const std::string moved = absl::StrCat("server ", d->grpc_address(), " failed (");
  ASSERT_TRUE((*ppl)
                  ->WaitFor(
                      err, [&] { return testing::ReadText(err).find(moved) != std::string::npos; }, kRunBound)
                  .ok())
      << testing::ReadText(err);
  ASSERT_TRUE(c->SendSignal(SIGKILL).ok());
  EXPECT_EQ((*ppl)->Wait(kRunBound), 1) << testing::ReadText(err);
  const std::string text = testing::ReadText(err);
  EXPECT_THAT(text, HasSubstr(absl::StrCat("every server failed; the last, ", c->grpc_address())));
  EXPECT_THAT(text, HasSubstr("rerun with the same --journal to resume"));
  EXPECT_THAT(text, Not(HasSubstr("windows per server")));
}

}  // namespace
}  // namespace ppl
}  // namespace scored

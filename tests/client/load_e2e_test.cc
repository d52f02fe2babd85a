// End-to-end: the real scored-load binary against the real `scored` daemon (CPU backend, stories260K-hf).
// Over mTLS with a bearer token (the TLS and token flags scored-ppl has): a run succeeds with all of them
// and is refused without the token or the certificates. Open loop (--rate): the requests asked for are all
// sent and answered, and the achieved rate is near the one asked for (generous bounds: 2 shared cores).
// Several servers (a comma list with a dns:/// entry): streams and open-loop requests reach every one, and a
// server with another model is refused naming it and the field.
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/child_process.h"
#include "tests/client/test_certs.h"
#include "tests/server/scored_process.h"

namespace scored {
namespace load {
namespace {

using testing::ChildRun;
using ::testing::HasSubstr;

constexpr char kToken[] = "load-tls-test-token-0123456789abcdef";

ChildRun RunLoadBinary(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {std::string(SCORED_BINARY_DIR) + "/client/load/scored-load"};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::RunToExit(argv, absl::StrCat(::testing::TempDir(), "/load_e2e.", ::getpid()),
                            absl::Seconds(120));
}

TEST(LoadE2eTest, MutualTlsWithTokenAndOpenLoopRate) {
  if (!testing::HaveOpenssl()) GTEST_SKIP() << "no openssl command line to make test certificates";
  char tmpl[] = "/tmp/scored_load_certs_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::string log;
  ASSERT_TRUE(testing::MakeTestCerts(dir, &log)) << log;
  testing::WriteTextFile(dir + "/token", std::string(kToken) + "\n");

  testing::ScoredProcessOptions options;
  options.args = {"--model=" + testing::StoriesModelDir(), "--backend=cpu",
                  "--tls_cert=" + dir + "/server.pem",     "--tls_key=" + dir + "/server.key",
                  "--tls_client_ca=" + dir + "/ca.pem",    "--auth_token_file=" + dir + "/token"};
  options.wait_for_serving = false;  // the helper's health probe speaks plaintext
  auto proc = testing::ScoredProcess::Start(options);
  ASSERT_TRUE(proc.ok()) << proc.status();
  const std::vector<std::string> server = {"--server=" + (*proc)->grpc_address(), "--lengths=16:1"};
  const std::vector<std::string> tls = {"--tls_ca=" + dir + "/ca.pem", "--tls_cert=" + dir + "/client.pem",
                                        "--tls_key=" + dir + "/client.key"};
  const std::string token = "--auth_token_file=" + dir + "/token";
  auto args = [&](std::vector<std::string> extra) {
    std::vector<std::string> all = server;
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  };

  // Closed loop with every credential: all requests answered. The first call waits for the server's start.
  std::vector<std::string> closed = args(tls);
  closed.insert(closed.end(), {token, "--requests=12", "--concurrency=2", "--connect_timeout_s=60",
                               "--json=" + dir + "/closed.json"});
  const ChildRun ok = RunLoadBinary(closed);
  ASSERT_EQ(ok.exit_code, 0) << ok.err << ok.out;
  const nlohmann::json closed_report = nlohmann::json::parse(testing::ReadTextFile(dir + "/closed.json"));
  EXPECT_EQ(closed_report["requests_ok"].get<int64_t>(), 12);
  EXPECT_FALSE(closed_report.contains("open_loop"));

  // No token: GetModelInfo is refused, the run cannot start.
  std::vector<std::string> no_token = args(tls);
  no_token.push_back("--requests=1");
  const ChildRun refused = RunLoadBinary(no_token);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("UNAUTHENTICATED"));

  // No client certificate, or plaintext: the channel never connects.
  const ChildRun no_cert =
      RunLoadBinary(args({"--tls_ca=" + dir + "/ca.pem", token, "--requests=1", "--connect_timeout_s=2"}));
  EXPECT_EQ(no_cert.exit_code, 1);
  EXPECT_THAT(no_cert.err, HasSubstr("cannot connect"));
  const ChildRun plaintext = RunLoadBinary(args({token, "--requests=1", "--connect_timeout_s=2"}));
  EXPECT_EQ(plaintext.exit_code, 1);
  EXPECT_THAT(plaintext.err, HasSubstr("cannot connect"));

  // Token flags as scored-ppl's: not both; a cert needs its key.
  const ChildRun both = RunLoadBinary(args({token, "--auth_token=x", "--requests=1"}));
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_THAT(both.err, HasSubstr("give --auth_token or --auth_token_file, not both"));
  const ChildRun half = RunLoadBinary(args({"--tls_cert=" + dir + "/client.pem", "--requests=1"}));
  EXPECT_EQ(half.exit_code, 2);
  EXPECT_THAT(half.err, HasSubstr("--tls_cert and --tls_key go together"));

  // Open loop by count: 40 requests at 40/s, all sent and answered, rate near 40.
  std::vector<std::string> open = args(tls);
  open.insert(open.end(), {token, "--rate=40", "--requests=40", "--json=" + dir + "/open.json"});
  const ChildRun by_count = RunLoadBinary(open);
  ASSERT_EQ(by_count.exit_code, 0) << by_count.err << by_count.out;
  EXPECT_THAT(by_count.out, HasSubstr("open loop at 40 req/s"));
  const nlohmann::json open_report = nlohmann::json::parse(testing::ReadTextFile(dir + "/open.json"));
  EXPECT_EQ(open_report["requests"].get<int64_t>(), 40);
  EXPECT_EQ(open_report["requests_ok"].get<int64_t>(), 40);
  EXPECT_EQ(open_report["latency_ms"]["count"].get<int64_t>(), 40);
  const double achieved = open_report["open_loop"]["rate_achieved"].get<double>();
  EXPECT_GT(achieved, 20.0);
  EXPECT_LT(achieved, 60.0);
  EXPECT_GE(open_report["open_loop"]["max_outstanding"].get<int64_t>(), 1);
  // 40 requests on a 1/40 s schedule take at least 39/40 s to start.
  EXPECT_GE(open_report["wall_s"].get<double>(), 0.97);

  // Open loop by duration: 1 s at 30/s starts at most 30 requests (slots 0 .. 29 s/30).
  std::vector<std::string> timed = args(tls);
  timed.insert(timed.end(), {token, "--rate=30", "--duration=1", "--json=" + dir + "/timed.json"});
  const ChildRun by_time = RunLoadBinary(timed);
  ASSERT_EQ(by_time.exit_code, 0) << by_time.err << by_time.out;
  const nlohmann::json timed_report = nlohmann::json::parse(testing::ReadTextFile(dir + "/timed.json"));
  EXPECT_LE(timed_report["requests"].get<int64_t>(), 30);
  EXPECT_GE(timed_report["requests"].get<int64_t>(), 10);
  EXPECT_EQ(timed_report["requests_ok"], timed_report["requests"]);

  // Open loop needs unary mode (exit 2, a bad command line).
  const ChildRun stream = RunLoadBinary(args({"--rate=10", "--requests=5", "--mode=stream"}));
  EXPECT_EQ(stream.exit_code, 2);
  EXPECT_THAT(stream.err, HasSubstr("needs unary mode"));

  std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
}

// The default --lengths (up to 2048 tokens) against a server of max_seq_len 512: fitted to it, said on
// stderr (before: "length 2048 exceeds the server's max_seq_len 512"); a given mix over the limit is still
// refused.
TEST(LoadE2eTest, DefaultLengthsFitTheServer) {
  testing::ScoredProcessOptions options;
  options.args = {"--model=" + testing::StoriesModelDir(), "--backend=cpu"};
  auto proc = testing::ScoredProcess::Start(options);
  ASSERT_TRUE(proc.ok()) << proc.status();
  const std::string json = absl::StrCat(::testing::TempDir(), "/load_default.", ::getpid(), ".json");
  const ChildRun fitted =
      RunLoadBinary({"--server=" + (*proc)->grpc_address(), "--requests=6", "--json=" + json});
  ASSERT_EQ(fitted.exit_code, 0) << fitted.err << fitted.out;
  EXPECT_THAT(fitted.err,
              HasSubstr("the default --lengths 64:0.5,512:0.4,2048:0.1 fitted to the server's limit "
                        "of 512 tokens: 64:0.5,512:0.5"));
  const nlohmann::json report = nlohmann::json::parse(testing::ReadTextFile(json));
  EXPECT_EQ(report["requests_ok"].get<int64_t>(), 6);
  const ChildRun refused =
      RunLoadBinary({"--server=" + (*proc)->grpc_address(), "--requests=1", "--lengths=2048:1"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("length 2048 exceeds the server's max_seq_len 512"));
}

TEST(LoadE2eTest, SeveralServersShareTheLoad) {
  testing::ScoredProcessOptions options;
  options.args = {"--model=" + testing::StoriesModelDir(), "--backend=cpu"};
  auto a = testing::ScoredProcess::Start(options);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = testing::ScoredProcess::Start(options);
  ASSERT_TRUE(b.ok()) << b.status();
  const std::string servers =
      absl::StrCat("--server=", (*a)->grpc_address(), ",dns:///127.0.0.1:", (*b)->grpc_port());
  const std::string json = absl::StrCat(::testing::TempDir(), "/load_multi.", ::getpid(), ".json");

  // Closed loop, 4 streams: streams 0 and 2 on A, 1 and 3 on B.
  const ChildRun streams = RunLoadBinary({servers, "--mode=stream", "--concurrency=4", "--inflight=2",
                                          "--requests=40", "--lengths=16:1", "--json=" + json});
  ASSERT_EQ(streams.exit_code, 0) << streams.err << streams.out;
  nlohmann::json report = nlohmann::json::parse(testing::ReadTextFile(json));
  EXPECT_EQ(report["requests_ok"].get<int64_t>(), 40);
  EXPECT_EQ(report["servers"], nlohmann::json::array({(*a)->grpc_address(), (*b)->grpc_address()}));
  const std::vector<int64_t> per_server = report["requests_per_server"].get<std::vector<int64_t>>();
  ASSERT_EQ(per_server.size(), 2u);
  EXPECT_GT(per_server[0], 0);
  EXPECT_GT(per_server[1], 0);
  EXPECT_EQ(per_server[0] + per_server[1], 40);
  EXPECT_THAT(streams.out, HasSubstr("servers      " + (*a)->grpc_address()));

  // Open loop: every request to the server with the fewest outstanding; both get some.
  const ChildRun open =
      RunLoadBinary({servers, "--rate=200", "--requests=40", "--lengths=16:1", "--json=" + json});
  ASSERT_EQ(open.exit_code, 0) << open.err << open.out;
  report = nlohmann::json::parse(testing::ReadTextFile(json));
  EXPECT_EQ(report["requests_ok"].get<int64_t>(), 40);
  const std::vector<int64_t> open_per_server = report["requests_per_server"].get<std::vector<int64_t>>();
  ASSERT_EQ(open_per_server.size(), 2u);
  EXPECT_GT(open_per_server[0], 0);
  EXPECT_GT(open_per_server[1], 0);
  EXPECT_EQ(open_per_server[0] + open_per_server[1], 40);

  // A third server with another model: refused before any request, naming it and the field.
  testing::ScoredProcessOptions other_options;
  other_options.args = {"--model=" + std::string(SCORED_FIXTURES_DIR) + "/stories260k-w4a16-channel",
                        "--backend=cpu"};
  auto other = testing::ScoredProcess::Start(other_options);
  ASSERT_TRUE(other.ok()) << other.status();
  const ChildRun refused =
      RunLoadBinary({absl::StrCat("--server=", (*a)->grpc_address(), ",", (*other)->grpc_address()),
                     "--requests=4", "--lengths=16:1"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr(absl::StrCat("server ", (*other)->grpc_address(), " differs from ",
                                                  (*a)->grpc_address(), " in model_fingerprint")));
}

}  // namespace
}  // namespace load
}  // namespace scored

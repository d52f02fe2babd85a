// End-to-end: scored-ppl over mTLS with a bearer token (--tls_ca, --tls_cert/--tls_key,
// --auth_token_file) against the real `scored` daemon (CPU backend, stories260K-hf) started with
// --tls_cert/--tls_key/--tls_client_ca/--auth_token_file. Certificates are made in the test with the
// openssl command line (EC P-256, valid 30 days); without `openssl` on PATH the test is skipped.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/client/test_certs.h"
#include "tests/server/scored_process.h"

namespace scored {
namespace ppl {
namespace {

constexpr char kToken[] = "ppl-tls-test-token-0123456789abcdef";

using testing::HaveOpenssl;
using testing::ReadTextFile;

// Runs scored-ppl with `flags`; returns its exit code (stderr in `err_path`).
int RunPpl(const std::string& flags, const std::string& err_path) {
  const std::string cmd =
      absl::StrCat(SCORED_BINARY_DIR, "/client/ppl/scored-ppl ", flags, " --data ", SCORED_DATA_DIR,
                   "/wikitext-2-raw/wiki.test.raw",
                   " --method chunks --ctx 512 --max_windows 20 --quiet > /dev/null 2> ", err_path);
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(PplTlsE2eTest, MutualTlsWithTokenScoresAndRefusesWithoutCredentials) {
  if (!HaveOpenssl()) GTEST_SKIP() << "no openssl command line to make test certificates";
  char tmpl[] = "/tmp/scored_ppl_certs_XXXXXX";
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
  const std::string server = " --server " + (*proc)->grpc_address();
  const std::string tls =
      " --tls_ca " + dir + "/ca.pem --tls_cert " + dir + "/client.pem --tls_key " + dir + "/client.key";
  const std::string err = dir + "/ppl.err";

  const std::string json_path = dir + "/report.json";
  ASSERT_EQ(
      RunPpl(server + tls + " --auth_token_file " + dir + "/token --connect_timeout_s 60 --json " + json_path,
             err),
      0)
      << ReadTextFile(err);
  const nlohmann::json report = nlohmann::json::parse(ReadTextFile(json_path));
  EXPECT_EQ(report["num_windows"].get<int64_t>(), 20);
  EXPECT_EQ(report["num_scored"].get<int64_t>(), 20 * 511);
  EXPECT_GT(report["ppl"].get<double>(), 1.0);

  // No token: the server refuses the first call.
  EXPECT_EQ(RunPpl(server + tls + " --connect_timeout_s 10", err), 1);
  EXPECT_NE(ReadTextFile(err).find("UNAUTHENTICATED"), std::string::npos) << ReadTextFile(err);

  // No client certificate: the TLS handshake fails, so the channel never connects.
  EXPECT_EQ(RunPpl(server + " --tls_ca " + dir + "/ca.pem --auth_token_file " + dir +
                       "/token --connect_timeout_s 2",
                   err),
            1);
  EXPECT_NE(ReadTextFile(err).find("cannot connect"), std::string::npos) << ReadTextFile(err);

  // Plaintext against the TLS listener: never connects either.
  EXPECT_EQ(RunPpl(server + " --auth_token_file " + dir + "/token --connect_timeout_s 2", err), 1);
  EXPECT_NE(ReadTextFile(err).find("cannot connect"), std::string::npos) << ReadTextFile(err);

  std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
}

}  // namespace
}  // namespace ppl
}  // namespace scored

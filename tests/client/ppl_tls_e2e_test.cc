// End-to-end: scored-ppl over mTLS with a bearer token (--tls_ca, --tls_cert/--tls_key,
// --auth_token_file) against the real `scored` daemon (CPU backend, stories260K-hf) started with
// --tls_cert/--tls_key/--tls_client_ca/--auth_token_file. Certificates are made in the test with the
// openssl command line (EC P-256, valid 30 days); without `openssl` on PATH the test is skipped.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/server/scored_process.h"

namespace scored {
namespace ppl {
namespace {

constexpr char kToken[] = "ppl-tls-test-token-0123456789abcdef";

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

bool HaveOpenssl() { return std::system("openssl version > /dev/null 2>&1") == 0; }

// CA, a server certificate for 127.0.0.1 and a client certificate, all signed by the CA.
bool MakeCerts(const std::string& dir, std::string* log) {
  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string script = absl::StrCat(
      "set -e; cd '", dir, "'\n", "openssl req -x509 ", ec,
      " -keyout ca.key -out ca.pem -days 30 -subj '/CN=scored-ppl test CA' ",
      "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign\n",
      "openssl req -new ", ec, " -keyout server.key -out server.csr -subj '/CN=localhost'\n",
      "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nbasicConstraints=CA:FALSE\\n",
      "extendedKeyUsage=serverAuth\\n' > server.ext\n",
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -set_serial 2 -days 30 ",
      "-extfile server.ext -out server.pem\n", "openssl req -new ", ec,
      " -keyout client.key -out client.csr -subj '/CN=scored-ppl test client'\n",
      "printf 'basicConstraints=CA:FALSE\\nextendedKeyUsage=clientAuth\\n' > client.ext\n",
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -set_serial 3 -days 30 ",
      "-extfile client.ext -out client.pem\n");
  WriteText(dir + "/make.sh", script);
  const int rc = std::system(absl::StrCat("bash '", dir, "/make.sh' > '", dir, "/make.log' 2>&1").c_str());
  if (rc != 0) *log = ReadText(dir + "/make.log");
  return rc == 0;
}

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
  ASSERT_TRUE(MakeCerts(dir, &log)) << log;
  WriteText(dir + "/token", std::string(kToken) + "\n");

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
      << ReadText(err);
  const nlohmann::json report = nlohmann::json::parse(ReadText(json_path));
  EXPECT_EQ(report["num_windows"].get<int64_t>(), 20);
  EXPECT_EQ(report["num_scored"].get<int64_t>(), 20 * 511);
  EXPECT_GT(report["ppl"].get<double>(), 1.0);

  // No token: the server refuses the first call.
  EXPECT_EQ(RunPpl(server + tls + " --connect_timeout_s 10", err), 1);
  EXPECT_NE(ReadText(err).find("UNAUTHENTICATED"), std::string::npos) << ReadText(err);

  // No client certificate: the TLS handshake fails, so the channel never connects.
  EXPECT_EQ(RunPpl(server + " --tls_ca " + dir + "/ca.pem --auth_token_file " + dir +
                       "/token --connect_timeout_s 2",
                   err),
            1);
  EXPECT_NE(ReadText(err).find("cannot connect"), std::string::npos) << ReadText(err);

  // Plaintext against the TLS listener: never connects either.
  EXPECT_EQ(RunPpl(server + " --auth_token_file " + dir + "/token --connect_timeout_s 2", err), 1);
  EXPECT_NE(ReadText(err).find("cannot connect"), std::string::npos) << ReadText(err);

  std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
}

}  // namespace
}  // namespace ppl
}  // namespace scored

// End-to-end security and robustness tests of the real `scored` binary (CPU backend, stories260K-hf):
// TLS (right CA, wrong CA), certificates and keys refused before the model loads (garbage, mismatched,
// expired), mTLS, bearer tokens (missing, wrong, right;
// health open; metrics), the message size limit, the remote-listen refusal, queued work of cancelled
// and expired calls dropped, and the sticky fatal engine error through --fault_inject.
//
// Certificates are made in the test with the openssl command line (EC P-256, valid 30 days; the
// expired one with -days -1, i.e. its notAfter lies one day before now). Without `openssl` on PATH the
// TLS tests skip.
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "scored/v1/scorer.grpc.pb.h"
#include "tests/server/scored_process.h"
#include "tests/server/test_certs.h"

namespace scored {
namespace {

using ::scored::testing::CheckHealth;
using ::scored::testing::HealthStatus;
using ::scored::testing::HttpGet;
using ::scored::testing::MetricValue;
using ::scored::testing::ScoredProcess;
using ::scored::testing::ScoredProcessOptions;
using ::testing::HasSubstr;

// 20 printable characters: the daemon requires 16..4096.
constexpr char kToken[] = "s3cr3t-t0ken-for-tests";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// A fresh folder per test binary with every key and certificate the tests use:
//   ca.pem/key          test CA                    other_ca.pem   an unrelated CA
//   server.pem/key      CN=localhost, SAN IP:127.0.0.1 + DNS:localhost, signed by ca, 30 days
//   expired.pem         the same key and names, notAfter in the past
//   client.pem/key      client certificate signed by ca
//   other_client.pem    the same client key, signed by other_ca
const testing::TestCerts* Certs() {
  const std::string ec = testing::kOpensslEcKey;
  const std::string script = absl::StrCat(
      "openssl req -x509 ", ec, " -keyout ca.key -out ca.pem -days 30 -subj '/CN=scored test CA' ",
      "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign\n",
      "openssl req -x509 ", ec, " -keyout other_ca.key -out other_ca.pem -days 30 ",
      "-subj '/CN=unrelated CA' ",
      "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign\n",
      "openssl req -new ", ec, " -keyout server.key -out server.csr -subj '/CN=localhost'\n",
      "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nbasicConstraints=CA:FALSE\\n",
      "extendedKeyUsage=serverAuth\\n' > server.ext\n",
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -set_serial 2 -days 30 ",
      "-extfile server.ext -out server.pem\n",
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -set_serial 3 -days -1 ",
      "-extfile server.ext -out expired.pem\n", "openssl req -new ", ec,
      " -keyout client.key -out client.csr -subj '/CN=scored test client'\n",
      "printf 'basicConstraints=CA:FALSE\\nextendedKeyUsage=clientAuth\\n' > client.ext\n",
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -set_serial 4 -days 30 ",
      "-extfile client.ext -out client.pem\n",
      "openssl x509 -req -in client.csr -CA other_ca.pem -CAkey other_ca.key -set_serial 5 -days 30 ",
      "-extfile client.ext -out other_client.pem\n", "openssl verify -CAfile ca.pem server.pem client.pem\n",
      "! openssl verify -CAfile ca.pem expired.pem\n");
  std::string error;
  const testing::TestCerts* certs = testing::TestCerts::Get("scored_certs", script, &error);
  if (certs == nullptr) ADD_FAILURE() << "making the test certificates failed:\n" << error;
  return certs;
}

std::vector<std::string> BaseArgs() {
  return {"--model=" + scored::testing::StoriesModelDir(), "--backend=cpu", "--batch_timeout_us=0"};
}

// Starts the daemon. With TLS the helper's plaintext health poll cannot connect, so it waits for the
// port file only: the daemon writes it after the listener is up and health is SERVING.
std::unique_ptr<ScoredProcess> StartOrDie(std::vector<std::string> extra, bool tls = false) {
  ScoredProcessOptions o;
  o.args = BaseArgs();
  for (std::string& a : extra) o.args.push_back(std::move(a));
  o.wait_for_serving = !tls;
  auto p = ScoredProcess::Start(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

std::shared_ptr<grpc::ChannelCredentials> TlsCredentials(const std::string& ca_file,
                                                         const std::string& client_cert_file = "",
                                                         const std::string& client_key_file = "") {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ReadFile(ca_file);
  if (!client_cert_file.empty()) {
    o.pem_cert_chain = ReadFile(client_cert_file);
    o.pem_private_key = ReadFile(client_key_file);
  }
  return grpc::SslCredentials(o);
}

std::unique_ptr<v1::Scorer::Stub> NewStub(const std::string& address,
                                          std::shared_ptr<grpc::ChannelCredentials> credentials) {
  return v1::Scorer::NewStub(grpc::CreateChannel(address, std::move(credentials)));
}

grpc::Status CallGetModelInfo(v1::Scorer::Stub* stub, const std::string& authorization = "") {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  if (!authorization.empty()) context.AddMetadata("authorization", authorization);
  v1::ModelInfo info;
  grpc::Status s = stub->GetModelInfo(&context, v1::GetModelInfoRequest(), &info);
  if (s.ok()) {
    EXPECT_EQ(info.backend(), "cpu");
  }
  return s;
}

v1::ScoreRequest TokensRequest(const std::vector<int32_t>& ids) {
  v1::ScoreRequest r;
  for (int32_t id : ids) r.mutable_tokens()->add_ids(id);
  return r;
}

grpc::Status CallScore(v1::Scorer::Stub* stub, const v1::ScoreRequest& request,
                       const std::string& authorization = "") {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  if (!authorization.empty()) context.AddMetadata("authorization", authorization);
  v1::ScoreResponse response;
  grpc::Status s = stub->Score(&context, request, &response);
  if (s.ok()) {
    EXPECT_EQ(response.num_scored(), static_cast<int32_t>(request.tokens().ids_size()) - 1);
  }
  return s;
}

double Metric(const ScoredProcess& p, const std::string& sample) {
  auto text = HttpGet("127.0.0.1", p.metrics_port(), "/metrics");
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return 0.0;
  auto v = MetricValue(*text, sample);
  return v.ok() ? *v : 0.0;  // absent = never incremented
}

// Polls a metric until it is >= want (or <= want with at_most); the server updates some after the RPC.
bool WaitForMetric(const ScoredProcess& p, const std::string& sample, double want, bool at_most = false) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    const double v = Metric(p, sample);
    if (at_most ? v <= want : v >= want) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

class SecurityE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::HaveOpenssl()) GTEST_SKIP() << "no openssl command line to make test certificates";
    certs_ = Certs();
    ASSERT_NE(certs_, nullptr) << "making the test certificates failed";
  }
  std::vector<std::string> TlsArgs(const std::string& cert = "server.pem") const {
    return {"--tls_cert=" + certs_->path(cert), "--tls_key=" + certs_->path("server.key")};
  }
  const testing::TestCerts* certs_ = nullptr;
};

TEST_F(SecurityE2eTest, TlsWithTheRightCaWorksAndPlaintextDoesNot) {
  auto proc = StartOrDie(TlsArgs(), /*tls=*/true);
  ASSERT_NE(proc, nullptr);
  auto channel = grpc::CreateChannel(proc->grpc_address(), TlsCredentials(certs_->path("ca.pem")));
  auto health = CheckHealth(channel, "", absl::Seconds(10));
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, HealthStatus::kServing) << "SERVING over TLS";
  auto stub = v1::Scorer::NewStub(channel);
  EXPECT_TRUE(CallGetModelInfo(stub.get()).ok());
  EXPECT_TRUE(CallScore(stub.get(), TokensRequest({1, 403, 407, 261, 378})).ok());

  auto plain = NewStub(proc->grpc_address(), grpc::InsecureChannelCredentials());
  EXPECT_EQ(CallGetModelInfo(plain.get()).error_code(), grpc::StatusCode::UNAVAILABLE)
      << "a plaintext client cannot talk to a TLS listener";
  EXPECT_THAT(proc->ReadLog(), HasSubstr("(TLS)"));
}

TEST_F(SecurityE2eTest, TlsWithTheWrongCaFails) {
  auto proc = StartOrDie(TlsArgs(), /*tls=*/true);
  ASSERT_NE(proc, nullptr);
  auto stub = NewStub(proc->grpc_address(), TlsCredentials(certs_->path("other_ca.pem")));
  EXPECT_EQ(CallGetModelInfo(stub.get()).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(SecurityE2eTest, MutualTlsRequiresAClientCertificate) {
  std::vector<std::string> args = TlsArgs();
  args.push_back("--tls_client_ca=" + certs_->path("ca.pem"));
  auto proc = StartOrDie(args, /*tls=*/true);
  ASSERT_NE(proc, nullptr);
  auto anonymous = NewStub(proc->grpc_address(), TlsCredentials(certs_->path("ca.pem")));
  EXPECT_EQ(CallGetModelInfo(anonymous.get()).error_code(), grpc::StatusCode::UNAVAILABLE);
  auto foreign = NewStub(
      proc->grpc_address(),
      TlsCredentials(certs_->path("ca.pem"), certs_->path("other_client.pem"), certs_->path("client.key")));
  EXPECT_EQ(CallGetModelInfo(foreign.get()).error_code(), grpc::StatusCode::UNAVAILABLE)
      << "a client certificate from another CA";
  auto with_cert =
      NewStub(proc->grpc_address(),
              TlsCredentials(certs_->path("ca.pem"), certs_->path("client.pem"), certs_->path("client.key")));
  EXPECT_TRUE(CallGetModelInfo(with_cert.get()).ok());
  EXPECT_TRUE(CallScore(with_cert.get(), TokensRequest({1, 403, 407, 261, 378})).ok());
  EXPECT_THAT(proc->ReadLog(), HasSubstr("(mTLS)"));
}

TEST_F(SecurityE2eTest, BadTlsFilesFailStartupNamingTheFlag) {
  ScoredProcessOptions o;
  o.args = BaseArgs();
  o.args.push_back("--tls_cert=" + certs_->path("server.pem"));
  o.args.push_back("--tls_key=" + certs_->path("make.sh"));
  o.startup_timeout = absl::Seconds(30);
  auto p = ScoredProcess::Start(o);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("--tls_key"));
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("not a PEM file"));
}

// Certificates and keys are parsed and matched with OpenSSL before the model loads. A file with a PEM
// "BEGIN" line but no certificate in it, a key of another certificate, a garbage client CA and an expired
// certificate all used to pass the start-up check (which looked for "-----BEGIN") and failed only after the
// model had loaded, with "cannot listen ... or not a valid certificate" (or, for the expired one, at every
// client's handshake). Now each is refused with exit code 1 and a message naming the flag, the file and
// what is wrong. --fault_inject=slow_load_ms makes a load take 10 minutes: an exit within the 30 s startup
// timeout, with no "loading" line in the log, proves the refusal came first.
TEST_F(SecurityE2eTest, BadCertificatesAndKeysAreRefusedBeforeTheModelLoads) {
  // Valid base64 and PEM framing around bytes that are no DER certificate.
  WriteFile(
      certs_->path("garbage.pem"),
      "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGUsIGp1c3QgdGV4dAo=\n-----END CERTIFICATE-----\n");
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> fragments;
  };
  const std::vector<Case> cases = {
      {{"--tls_cert=" + certs_->path("garbage.pem"), "--tls_key=" + certs_->path("server.key")},
       {"--tls_cert: '" + certs_->path("garbage.pem") + "'", "is not a valid X.509 certificate"}},
      {{"--tls_cert=" + certs_->path("server.pem"), "--tls_key=" + certs_->path("client.key")},
       {"--tls_key: '" + certs_->path("client.key") + "' does not match the certificate in --tls_cert '" +
        certs_->path("server.pem") + "'"}},
      {{"--tls_cert=" + certs_->path("server.key"), "--tls_key=" + certs_->path("server.key")},
       {"--tls_cert: '" + certs_->path("server.key") + "' holds no certificate", "'PRIVATE KEY'"}},
      {{"--tls_cert=" + certs_->path("server.pem"), "--tls_key=" + certs_->path("server.key"),
        "--tls_client_ca=" + certs_->path("garbage.pem")},
       {"--tls_client_ca: '" + certs_->path("garbage.pem") + "'", "is not a valid X.509 certificate"}},
      // An expired certificate is refused, not served: every client would fail its handshake.
      {{"--tls_cert=" + certs_->path("expired.pem"), "--tls_key=" + certs_->path("server.key")},
       {"--tls_cert: '" + certs_->path("expired.pem") + "'", "(/CN=localhost) expired on"}},
  };
  for (const Case& c : cases) {
    ScoredProcessOptions o;
    o.args = BaseArgs();
    for (const std::string& a : c.args) o.args.push_back(a);
    o.args.push_back("--fault_inject=slow_load_ms:600000");
    o.startup_timeout = absl::Seconds(30);
    auto p = ScoredProcess::Start(o);
    ASSERT_FALSE(p.ok()) << "started with " << c.args[0];
    const std::string message(p.status().message());
    EXPECT_THAT(message, HasSubstr("exited with code 1")) << message;
    for (const std::string& f : c.fragments) EXPECT_THAT(message, HasSubstr(f));
    EXPECT_THAT(message, ::testing::Not(HasSubstr("loading"))) << "refused before the model load";
  }
}

class TokenE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/scored_token_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    token_dir_ = new std::string(tmpl);
    WriteFile(*token_dir_ + "/token", std::string(kToken) + "\n");
    proc_ = StartOrDie({"--auth_token_file=" + *token_dir_ + "/token"}).release();
  }
  static void TearDownTestSuite() {
    delete proc_;
    proc_ = nullptr;
    std::remove((*token_dir_ + "/token").c_str());
    rmdir(token_dir_->c_str());
    delete token_dir_;
  }
  void SetUp() override {
    ASSERT_NE(proc_, nullptr);
    stub_ = NewStub(proc_->grpc_address(), grpc::InsecureChannelCredentials());
  }
  static ScoredProcess* proc_;
  static std::string* token_dir_;
  std::unique_ptr<v1::Scorer::Stub> stub_;
};

ScoredProcess* TokenE2eTest::proc_ = nullptr;
std::string* TokenE2eTest::token_dir_ = nullptr;

TEST_F(TokenE2eTest, MissingTokenIsUnauthenticated) {
  const double before = Metric(*proc_, "scored_requests_total{code=\"UNAUTHENTICATED\",method=\"Score\"}");
  const grpc::Status s = CallScore(stub_.get(), TokensRequest({1, 403, 407}));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(s.error_message(), HasSubstr("authorization: Bearer <token>"));
  EXPECT_EQ(Metric(*proc_, "scored_requests_total{code=\"UNAUTHENTICATED\",method=\"Score\"}"), before + 1);
  EXPECT_EQ(CallGetModelInfo(stub_.get()).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(TokenE2eTest, WrongOrMalformedTokenIsUnauthenticated) {
  grpc::Status s = CallScore(stub_.get(), TokensRequest({1, 403, 407}), "Bearer s3cr3t-t0ken-for-testz");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(s.error_message(), HasSubstr("not valid"));
  s = CallScore(stub_.get(), TokensRequest({1, 403, 407}), absl::StrCat("Bearer ", kToken, "x"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << "a longer token with the right prefix";
  s = CallScore(stub_.get(), TokensRequest({1, 403, 407}), kToken);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(s.error_message(), HasSubstr("malformed"));
}

TEST_F(TokenE2eTest, RightTokenWorksOnEveryMethod) {
  const std::string auth = absl::StrCat("Bearer ", kToken);
  EXPECT_TRUE(CallScore(stub_.get(), TokensRequest({1, 403, 407, 261}), auth).ok());
  EXPECT_TRUE(CallScore(stub_.get(), TokensRequest({1, 403}), absl::StrCat("bearer ", kToken)).ok())
      << "the scheme is case-insensitive";
  EXPECT_TRUE(CallGetModelInfo(stub_.get(), auth).ok());

  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", auth);
  auto stream = stub_->ScoreStream(&ctx);
  ASSERT_TRUE(stream->Write(TokensRequest({1, 403, 407})));
  stream->WritesDone();
  v1::ScoreResponse r;
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_FALSE(r.has_error());
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(TokenE2eTest, StreamWithoutTokenIsUnauthenticated) {
  grpc::ClientContext ctx;
  auto stream = stub_->ScoreStream(&ctx);
  stream->Write(TokensRequest({1, 403, 407}));
  stream->WritesDone();
  v1::ScoreResponse r;
  EXPECT_FALSE(stream->Read(&r));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(TokenE2eTest, HealthNeedsNoToken) {
  auto health = CheckHealth(proc_->grpc_address(), "");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, HealthStatus::kServing);
}

TEST(LimitsE2eTest, OversizedMessageIsResourceExhausted) {
  auto proc = StartOrDie({"--max_message_bytes=4096"});
  ASSERT_NE(proc, nullptr);
  auto stub = NewStub(proc->grpc_address(), grpc::InsecureChannelCredentials());
  // 3000 ids of 300..399 are 2 varint bytes each: ~6 KB > 4096.
  std::vector<int32_t> ids(3000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = 300 + static_cast<int32_t>(i % 100);
  const grpc::Status big = CallScore(stub.get(), TokensRequest(ids));
  EXPECT_EQ(big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << big.error_message();
  EXPECT_TRUE(CallScore(stub.get(), TokensRequest({1, 403, 407})).ok()) << "the daemon keeps serving";
}

TEST(LimitsE2eTest, BadLimitAndSecurityFlagsFailStartup) {
  struct Case {
    std::vector<std::string> args;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {{"--max_message_bytes=10"}, "--max_message_bytes must be in [1024"},
      {{"--tls_cert=/nonexistent.pem"}, "--tls_cert and --tls_key must be given together"},
      {{"--tls_client_ca=/nonexistent.pem"}, "--tls_client_ca needs --tls_cert"},
      {{"--tls_cert=/nonexistent.pem", "--tls_key=/nonexistent.key"}, "--tls_cert: cannot read"},
      {{"--auth_token_file=/nonexistent"}, "--auth_token_file: cannot read"},
      {{"--listen=0.0.0.0:0"}, "--allow_insecure_remote"},
      {{"--fault_inject=fatal_after:x"}, "--fault_inject must be fatal_after:N"},
      {{"--fault_inject=device_trap_after:0"},
       "a device trap (--fault_inject=device_trap_after) needs the cuda"},
  };
  for (const Case& c : cases) {
    ScoredProcessOptions o;
    o.args = BaseArgs();
    for (const std::string& a : c.args) o.args.push_back(a);
    o.startup_timeout = absl::Seconds(30);
    auto p = ScoredProcess::Start(o);
    ASSERT_FALSE(p.ok()) << "started with " << c.args[0];
    EXPECT_THAT(std::string(p.status().message()), HasSubstr("exited with code 1"));
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(c.fragment));
  }
}

// A numeric flag out of its range is refused with exit code 1 and a message naming the flag and the range,
// before anything is loaded: --fault_inject=slow_load_ms makes a load take 10 minutes, so an exit within the
// 30 s startup timeout can only come from the flag check. (--num_threads=100000 used to start 100000
// threads in the CPU engine and abort with std::system_error, exit 134, at 4 GB.)
TEST(LimitsE2eTest, OutOfRangeNumericFlagsExitOneBeforeLoading) {
  struct Case {
    std::string flag;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {"--num_threads=100000", "--num_threads must be in [0, 1024] (0 = the usable CPUs), got 100000"},
      {"--stream_window=1000000", "--stream_window must be in [1, 1024], got 1000000"},
      {"--max_queue=-1", "--max_queue must be in [1, 65536], got -1"},
      {"--shutdown_grace_s=nan", "--shutdown_grace_s must be in [0, 3600] seconds"},
  };
  for (const Case& c : cases) {
    ScoredProcessOptions o;
    o.args = BaseArgs();
    o.args.push_back(c.flag);
    o.args.push_back("--fault_inject=slow_load_ms:600000");
    o.startup_timeout = absl::Seconds(30);
    const absl::Time start = absl::Now();
    auto p = ScoredProcess::Start(o);
    ASSERT_FALSE(p.ok()) << "started with " << c.flag;
    const std::string message(p.status().message());
    EXPECT_THAT(message, HasSubstr("exited with code 1")) << "refused, not crashed";
    EXPECT_THAT(message, HasSubstr(c.fragment));
    EXPECT_THAT(message, ::testing::Not(HasSubstr("loading"))) << "nothing was loaded";
    EXPECT_LT(absl::Now() - start, absl::Seconds(20)) << c.flag;
  }
}

// A request cancelled, or whose deadline passes, while it waits in the queue never reaches the engine:
// with a 3 s batch window both leave the queue long before a batch would start, and the engine's batch
// counter stays at 0 until a normal request runs.
TEST(LimitsE2eTest, CancelledAndExpiredQueuedWorkIsDropped) {
  auto proc = StartOrDie({"--batch_timeout_us=3000000"});
  ASSERT_NE(proc, nullptr);
  auto stub = NewStub(proc->grpc_address(), grpc::InsecureChannelCredentials());

  grpc::ClientContext cancelled_ctx;
  const v1::ScoreRequest cancelled_request = TokensRequest({1, 403, 407});
  v1::ScoreResponse cancelled_response;
  grpc::Status cancelled_status;
  absl::Notification cancelled_done;
  stub->async()->Score(&cancelled_ctx, &cancelled_request, &cancelled_response, [&](grpc::Status s) {
    cancelled_status = std::move(s);
    cancelled_done.Notify();
  });
  ASSERT_TRUE(WaitForMetric(*proc, "scored_queue_depth", 1)) << "the request is queued";
  cancelled_ctx.TryCancel();
  ASSERT_TRUE(cancelled_done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(cancelled_status.error_code(), grpc::StatusCode::CANCELLED);

  grpc::ClientContext expiring_ctx;
  expiring_ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(300)));
  v1::ScoreResponse expiring_response;
  EXPECT_EQ(stub->Score(&expiring_ctx, TokensRequest({1, 403, 407}), &expiring_response).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);

  ASSERT_TRUE(WaitForMetric(*proc, "scored_queue_depth", 0, /*at_most=*/true)) << "both left the queue";
  EXPECT_EQ(Metric(*proc, "scored_batch_tokens_count"), 0) << "no engine batch ran for them";
  EXPECT_EQ(Metric(*proc, "scored_tokens_scored_total"), 0);

  EXPECT_TRUE(CallScore(stub.get(), TokensRequest({1, 403, 407, 261})).ok());
  EXPECT_EQ(Metric(*proc, "scored_batch_tokens_count"), 1);
  EXPECT_EQ(Metric(*proc, "scored_batch_tokens_sum"), 4) << "only the normal request's 4 tokens";
}

// The sticky fatal error: 2 batches succeed, the third fails; from then on every call is UNAVAILABLE
// and health is NOT_SERVING (the listener stays up 2 s for that: these calls take milliseconds), then
// the process exits 1.
TEST(FaultInjectionE2eTest, FatalEngineErrorIsStickyAndExitsNonZero) {
  auto proc = StartOrDie({"--fault_inject=fatal_after:2", "--shutdown_grace_s=5"});
  ASSERT_NE(proc, nullptr);
  auto stub = NewStub(proc->grpc_address(), grpc::InsecureChannelCredentials());
  EXPECT_TRUE(CallScore(stub.get(), TokensRequest({1, 403, 407})).ok());
  EXPECT_TRUE(CallScore(stub.get(), TokensRequest({1, 403, 407, 261})).ok());
  const grpc::Status failed = CallScore(stub.get(), TokensRequest({1, 403}));
  EXPECT_EQ(failed.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(failed.error_message(), HasSubstr("injected fatal engine error"));

  EXPECT_EQ(CallScore(stub.get(), TokensRequest({1, 403})).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(CallGetModelInfo(stub.get()).error_code(), grpc::StatusCode::UNAVAILABLE);
  const grpc::Status later = CallScore(stub.get(), TokensRequest({1, 403, 407}));
  EXPECT_EQ(later.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(later.error_message(), HasSubstr("the engine failed and cannot serve"));
  auto health = CheckHealth(proc->grpc_address(), "");
  ASSERT_TRUE(health.ok()) << health.status() << " (the listener stays up 2 s after the failure)";
  EXPECT_EQ(*health, HealthStatus::kNotServing);
  auto code = proc->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  EXPECT_THAT(proc->ReadLog(), HasSubstr("exiting after a fatal engine error"));
}

}  // namespace
}  // namespace scored

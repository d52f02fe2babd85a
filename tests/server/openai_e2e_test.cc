// End-to-end tests of the OpenAI-compatible endpoint (--openai_listen, server/openai_http.h) of the real
// `scored` (CPU backend, stories260K-hf) on 127.0.0.1:0, with an HTTP client of the same library: the port
// in the port file and the log, TLS and mTLS with the gRPC listener's files (certificates made with the
// openssl command line; those tests skip without it), the token, the flags refused at start, a batch of
// prompts in one engine batch of the shared batcher (its metric), HTTP and gRPC clients at once, and a fatal
// engine error (503, /health 503, exit 1). Formats and lm-eval: tests/server/openai_api_test.cc,
// tests/python/test_openai.py.
#include <httplib.h>
#include <signal.h>

#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scored/v1/scorer.grpc.pb.h"
#include "tests/server/scored_process.h"
#include "tests/server/test_certs.h"

namespace scored {
namespace {

using ::scored::testing::HttpGet;
using ::scored::testing::MetricValue;
using ::scored::testing::ScoredProcess;
using ::scored::testing::ScoredProcessOptions;
using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr char kToken[] = "openai-e2e-token-0123456789";

// The client library writes with plain send(): a server that closes a TLS handshake it refuses must not kill
// the test with SIGPIPE.
const bool kSigpipeIgnored = [] {
  signal(SIGPIPE, SIG_IGN);
  return true;
}();

std::vector<std::string> BaseArgs() {
  return {"--model=" + scored::testing::StoriesModelDir(), "--backend=cpu", "--openai_listen=127.0.0.1:0"};
}

std::unique_ptr<ScoredProcess> StartOrDie(std::vector<std::string> extra, bool tls = false) {
  ScoredProcessOptions o;
  o.args = BaseArgs();
  for (std::string& a : extra) o.args.push_back(std::move(a));
  o.wait_for_serving = !tls;  // the helper's health poll is plaintext; the port file comes after SERVING
  auto p = ScoredProcess::Start(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

// The "openai" entry of the port file (the helper's ReadPortFile knows grpc and metrics only).
int OpenAiPort(const ScoredProcess& proc) {
  std::ifstream in(proc.port_file());
  const Json ports = Json::parse(in, nullptr, false);
  if (ports.is_discarded() || !ports.contains("openai") || !ports["openai"].is_number_integer()) return 0;
  return ports["openai"].get<int>();
}

std::string WriteToken(const std::string& dir) {
  const std::string path = dir + "/token";
  std::ofstream(path) << kToken << "\n";
  return path;
}

const testing::TestCerts* Certs() {
  const std::string ec = testing::kOpensslEcKey;
  const std::string script = absl::StrCat(
      "openssl req -x509 ", ec, " -keyout ca.key -out ca.pem -days 30 -subj '/CN=scored test CA' ",
      "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign\n",
      "openssl req -new ", ec, " -keyout server.key -out server.csr -subj '/CN=localhost'\n",
      "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nbasicConstraints=CA:FALSE\\n",
      "extendedKeyUsage=serverAuth\\n' > server.ext\n",
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -set_serial 2 -days 30 ",
      "-extfile server.ext -out server.pem\n", "openssl req -new ", ec,
      " -keyout client.key -out client.csr -subj '/CN=scored test client'\n",
      "printf 'basicConstraints=CA:FALSE\\nextendedKeyUsage=clientAuth\\n' > client.ext\n",
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -set_serial 4 -days 30 ",
      "-extfile client.ext -out client.pem\n", "openssl verify -CAfile ca.pem server.pem client.pem\n",
      "echo " + std::string(kToken) + " > token\n");
  std::string error;
  const testing::TestCerts* certs = testing::TestCerts::Get("scored_openai_certs", script, &error);
  if (certs == nullptr) ADD_FAILURE() << "making the test certificates failed:\n" << error;
  return certs;
}

httplib::Headers Bearer() { return {{"Authorization", absl::StrCat("Bearer ", kToken)}}; }

const char kCompletion[] =
    R"({"prompt": [1, 403, 407, 261, 378], "max_tokens": 1, "echo": true, "logprobs": 1})";

TEST(OpenAiE2eTest, PortFileLogAndTokenOnPlainHttp) {
  const std::string dir = ::testing::TempDir();
  auto proc = StartOrDie({"--auth_token_file=" + WriteToken(dir)});
  ASSERT_NE(proc, nullptr);
  const int port = OpenAiPort(*proc);
  ASSERT_GT(port, 0);
  EXPECT_NE(port, proc->grpc_port());
  EXPECT_THAT(proc->ReadLog(),
              HasSubstr(absl::StrCat("serving the OpenAI-compatible API on http://127.0.0.1:", port,
                                     "/v1 (bearer token required)")));
  httplib::Client http("127.0.0.1", port);
  auto health = http.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto refused = http.Post("/v1/completions", kCompletion, "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401);
  EXPECT_EQ(refused->get_header_value("WWW-Authenticate"), "Bearer");
  EXPECT_EQ(Json::parse(refused->body)["error"]["type"], "authentication_error");
  auto ok = http.Post("/v1/completions", Bearer(), kCompletion, "application/json");
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 200) << ok->body;
  const Json j = Json::parse(ok->body);
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"].size(), 6u);
  EXPECT_EQ(j["choices"][0]["text"], "<s>Once upon a time,");
}

// vLLM's prompt_logprobs over HTTP gives what gRPC Score gives (logprob, rank, top-k) for the same ids; a
// text prompt's text_offset indexes its echoed text; /v1/models/{id} answers; the chat, embeddings and
// responses routes say 501 and what to use instead (before: prompt_logprobs silently ignored, bare 404s).
TEST(OpenAiE2eTest, PromptLogprobsModelsByIdAndUnservedRoutes) {
  auto proc = StartOrDie({});
  ASSERT_NE(proc, nullptr);
  httplib::Client http("127.0.0.1", OpenAiPort(*proc));
  const std::vector<int> ids = {1, 403, 407, 261, 378};
  auto scored = http.Post("/v1/completions",
                          R"({"prompt": [1, 403, 407, 261, 378], "max_tokens": 0, "prompt_logprobs": 3})",
                          "application/json");
  ASSERT_TRUE(scored);
  ASSERT_EQ(scored->status, 200) << scored->body;
  const Json plp = Json::parse(scored->body)["choices"][0]["prompt_logprobs"];
  auto stub =
      v1::Scorer::NewStub(grpc::CreateChannel(proc->grpc_address(), grpc::InsecureChannelCredentials()));
  v1::ScoreRequest req;
  for (int id : ids) req.mutable_tokens()->add_ids(id);
  req.set_top_k(3);
  req.set_want_rank(true);
  v1::ScoreResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub->Score(&ctx, req, &resp).ok());
  ASSERT_EQ(plp.size(), ids.size());
  EXPECT_TRUE(plp[0].is_null());
  for (int i = 0; i < 4; ++i) {
    const Json& own = plp[i + 1][std::to_string(ids[i + 1])];
    EXPECT_EQ(own["logprob"].get<float>(), resp.logprob(i)) << i;
    EXPECT_EQ(own["rank"].get<int>(), resp.rank(i)) << i;
    for (const v1::TopToken& top : resp.top_k(i).tokens()) {
      EXPECT_EQ(plp[i + 1][std::to_string(top.id())]["logprob"].get<float>(), top.logprob()) << i;
    }
  }
  auto text = http.Post("/v1/completions",
                        R"({"prompt": "Once upon a time", "max_tokens": 0, "echo": true, "logprobs": 0})",
                        "application/json");
  ASSERT_TRUE(text);
  ASSERT_EQ(text->status, 200) << text->body;
  const Json choice = Json::parse(text->body)["choices"][0];
  const std::string echoed = choice["text"];
  const Json& tokens = choice["logprobs"]["tokens"];
  const Json& offsets = choice["logprobs"]["text_offset"];
  ASSERT_EQ(tokens.size(), offsets.size());
  for (size_t i = 1; i < tokens.size(); ++i) {  // ASCII: code points are bytes
    const std::string piece = tokens[i];
    EXPECT_EQ(echoed.substr(offsets[i].get<size_t>(), piece.size()), piece) << i;
  }
  auto model = http.Get("/v1/models/stories260K-hf");
  ASSERT_TRUE(model);
  EXPECT_EQ(model->status, 200) << model->body;
  EXPECT_EQ(Json::parse(model->body)["id"], "stories260K-hf");
  auto other = http.Get("/v1/models/gpt-4");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  for (const char* route : {"/v1/chat/completions", "/v1/embeddings", "/v1/responses"}) {
    auto r = http.Post(route, R"({"model": "stories260K-hf", "messages": []})", "application/json");
    ASSERT_TRUE(r) << route;
    EXPECT_EQ(r->status, 501) << route;
    EXPECT_THAT(Json::parse(r->body)["error"]["message"].get<std::string>(), HasSubstr("/v1/completions"))
        << route;
  }
}

// A body is charged to the memory budget for what parsing it would take, before it is parsed: a batch of 120
// prompts of 500 ids (~360 KB of JSON, ~2 MB as a DOM) against a 1 MiB budget is 429; an id list longer than
// max_seq_len (512) is 400 before it is parsed, on /detokenize too; JSON nested deeper than any request is
// 400 at once. A small request still scores there.
TEST(OpenAiE2eTest, ParsingIsChargedToTheMemoryBudgetFirst) {
  auto proc = StartOrDie({"--max_buffered_bytes=1048576"});
  ASSERT_NE(proc, nullptr);
  httplib::Client http("127.0.0.1", OpenAiPort(*proc));
  std::string prompt = "[1";
  for (int i = 0; i < 499; ++i) prompt += ",403";
  prompt += "]";
  std::string batch = "[" + prompt;
  for (int i = 0; i < 119; ++i) batch += "," + prompt;
  batch += "]";
  auto big =
      http.Post("/v1/completions", R"({"max_tokens": 0, "prompt": )" + batch + "}", "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 429) << big->body;
  EXPECT_THAT(Json::parse(big->body)["error"]["message"].get<std::string>(), HasSubstr("max_buffered_bytes"));
  std::string ids = "[1";
  for (int i = 0; i < 60000; ++i) ids += ",403";
  ids += "]";
  auto detok = http.Post("/detokenize", R"({"tokens": )" + ids + "}", "application/json");
  ASSERT_TRUE(detok);
  EXPECT_EQ(detok->status, 400) << detok->body;
  EXPECT_THAT(detok->body, HasSubstr("513 or more elements"));
  auto deep =
      http.Post("/v1/completions",
                R"({"max_tokens": 0, "prompt": )" + std::string(100000, '[') + std::string(100000, ']') + "}",
                "application/json");
  ASSERT_TRUE(deep);
  EXPECT_EQ(deep->status, 400);
  EXPECT_THAT(deep->body, HasSubstr("deeper than 16 levels"));
  auto small = http.Post("/v1/completions", kCompletion, "application/json");
  ASSERT_TRUE(small);
  EXPECT_EQ(small->status, 200) << small->body;
  auto scrape = HttpGet("127.0.0.1", proc->metrics_port(), "/metrics");
  ASSERT_TRUE(scrape.ok());
  EXPECT_EQ(*MetricValue(*scrape, "scored_buffered_bytes"), 0.0);  // every charge released
}

// The tokenizer routes are open by default (lm-eval's remote tokenizer sends no OPENAI_API_KEY), /v1/* is
// not; with --openai_tokenizer_auth they need the token too.
TEST(OpenAiE2eTest, TokenizerRoutesOpenUnlessAsked) {
  const std::string dir = ::testing::TempDir();
  for (const bool tokenizer_auth : {false, true}) {
    std::vector<std::string> args = {"--auth_token_file=" + WriteToken(dir)};
    if (tokenizer_auth) args.push_back("--openai_tokenizer_auth");
    auto proc = StartOrDie(args);
    ASSERT_NE(proc, nullptr);
    httplib::Client http("127.0.0.1", OpenAiPort(*proc));
    const int want = tokenizer_auth ? 401 : 200;
    auto info = http.Get("/tokenizer_info");
    ASSERT_TRUE(info);
    EXPECT_EQ(info->status, want) << info->body;
    auto tokenize = http.Post("/tokenize", R"({"prompt": "Once upon a time"})", "application/json");
    ASSERT_TRUE(tokenize);
    EXPECT_EQ(tokenize->status, want) << tokenize->body;
    if (!tokenizer_auth) {
      EXPECT_EQ(Json::parse(tokenize->body)["tokens"], Json::parse("[1, 403, 407, 261, 378]"));
    }
    auto detokenize = http.Post("/detokenize", R"({"tokens": [403, 407]})", "application/json");
    ASSERT_TRUE(detokenize);
    EXPECT_EQ(detokenize->status, want) << detokenize->body;
    auto models = http.Get("/v1/models");
    ASSERT_TRUE(models);
    EXPECT_EQ(models->status, 401);
    auto with_token = http.Get("/tokenizer_info", Bearer());
    ASSERT_TRUE(with_token);
    EXPECT_EQ(with_token->status, 200);
  }
}

TEST(OpenAiE2eTest, TlsAndMtlsUseTheGrpcListenersFiles) {
  if (!testing::HaveOpenssl()) GTEST_SKIP() << "no openssl command line";
  const testing::TestCerts* certs = Certs();
  ASSERT_NE(certs, nullptr);
  auto proc = StartOrDie({"--tls_cert=" + certs->path("server.pem"), "--tls_key=" + certs->path("server.key"),
                          "--auth_token_file=" + certs->path("token")},
                         /*tls=*/true);
  ASSERT_NE(proc, nullptr);
  const int port = OpenAiPort(*proc);
  ASSERT_GT(port, 0);
  EXPECT_THAT(proc->ReadLog(), HasSubstr(absl::StrCat("on https://127.0.0.1:", port, "/v1")));
  httplib::SSLClient https("127.0.0.1", port);
  https.set_ca_cert_path(certs->path("ca.pem").c_str());
  https.enable_server_certificate_verification(true);
  auto ok = https.Post("/v1/completions", Bearer(), kCompletion, "application/json");
  ASSERT_TRUE(ok) << httplib::to_string(ok.error());
  EXPECT_EQ(ok->status, 200) << ok->body;
  // A plaintext client gets no HTTP answer from a TLS port.
  httplib::Client plain("127.0.0.1", port);
  plain.set_read_timeout(5, 0);
  auto none = plain.Get("/health");
  EXPECT_FALSE(none && none->status == 200);
  // A client that does not trust the server's CA fails its handshake.
  httplib::SSLClient untrusting("127.0.0.1", port);
  untrusting.set_ca_cert_path(certs->path("client.pem").c_str());
  untrusting.enable_server_certificate_verification(true);
  EXPECT_FALSE(untrusting.Get("/health"));

  // mTLS: no client certificate, no answer; the CA's client certificate, served.
  auto mtls = StartOrDie({"--tls_cert=" + certs->path("server.pem"), "--tls_key=" + certs->path("server.key"),
                          "--tls_client_ca=" + certs->path("ca.pem")},
                         /*tls=*/true);
  ASSERT_NE(mtls, nullptr);
  const int mtls_port = OpenAiPort(*mtls);
  httplib::SSLClient anonymous("127.0.0.1", mtls_port);
  anonymous.set_ca_cert_path(certs->path("ca.pem").c_str());
  anonymous.enable_server_certificate_verification(true);
  auto refused = anonymous.Get("/health");
  EXPECT_FALSE(refused && refused->status == 200);
  httplib::SSLClient client("127.0.0.1", mtls_port, certs->path("client.pem"), certs->path("client.key"));
  client.set_ca_cert_path(certs->path("ca.pem").c_str());
  client.enable_server_certificate_verification(true);
  auto served = client.Get("/health");
  ASSERT_TRUE(served) << httplib::to_string(served.error());
  EXPECT_EQ(served->status, 200);
}

TEST(OpenAiE2eTest, FlagsRefusedAtStart) {
  struct Case {
    std::string flag;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {"--openai_listen=0.0.0.0:0", "--openai_listen 0.0.0.0:0 is not a loopback address"},
      {"--openai_listen=localhost", "--openai_listen"},
      {"--openai_threads=0", "--openai_threads must be in [1, 1024]"},
  };
  for (const Case& c : cases) {
    ScoredProcessOptions o;
    o.args = BaseArgs();
    o.args.push_back(c.flag);
    o.startup_timeout = absl::Seconds(30);
    auto p = ScoredProcess::Start(o);
    ASSERT_FALSE(p.ok()) << "started with " << c.flag;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr("exited with code 1"));
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(c.fragment));
  }
}

// The prompts of one request are queued together in the batcher gRPC uses: with a long batch window they
// are one engine batch (scored_batch_tokens counts batches and their tokens), and HTTP and gRPC clients at
// once get the answers each gets alone.
TEST(OpenAiE2eTest, SharesTheBatcherWithGrpc) {
  auto proc = StartOrDie({"--batch_timeout_us=300000"});
  ASSERT_NE(proc, nullptr);
  const int port = OpenAiPort(*proc);
  httplib::Client http("127.0.0.1", port);
  auto batch = http.Post("/v1/completions",
                         R"({"prompt": [[1, 403, 407], [1, 403, 407, 261], [1, 403]], "max_tokens": 0,
                             "echo": true, "logprobs": 0})",
                         "application/json");
  ASSERT_TRUE(batch);
  ASSERT_EQ(batch->status, 200) << batch->body;
  auto scrape = HttpGet("127.0.0.1", proc->metrics_port(), "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_EQ(*MetricValue(*scrape, "scored_batch_tokens_count"), 1.0);
  EXPECT_EQ(*MetricValue(*scrape, "scored_batch_tokens_sum"), 9.0);
  EXPECT_EQ(*MetricValue(*scrape, "scored_requests_total{code=\"OK\",method=\"OpenAI/v1/completions\"}"),
            1.0);
  const Json alone = Json::parse(batch->body);
  ASSERT_EQ(alone["choices"].size(), 3u);

  // 4 HTTP threads and a gRPC client at once.
  auto channel = grpc::CreateChannel(proc->grpc_address(), grpc::InsecureChannelCredentials());
  auto stub = v1::Scorer::NewStub(channel);
  std::vector<std::string> bodies(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      httplib::Client c("127.0.0.1", port);
      auto r = c.Post("/v1/completions",
                      R"({"prompt": [[1, 403, 407], [1, 403, 407, 261], [1, 403]], "max_tokens": 0,
                          "echo": true, "logprobs": 0})",
                      "application/json");
      if (r && r->status == 200) bodies[t] = r->body;
    });
  }
  v1::ScoreRequest req;
  for (int id : {1, 403, 407, 261}) req.mutable_tokens()->add_ids(id);
  v1::ScoreResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub->Score(&ctx, req, &resp).ok());
  for (std::thread& t : threads) t.join();
  for (const std::string& body : bodies) {
    ASSERT_FALSE(body.empty());
    const Json j = Json::parse(body);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(j["choices"][i]["logprobs"]["token_logprobs"],
                alone["choices"][i]["logprobs"]["token_logprobs"]);
    }
  }
  const Json& second = alone["choices"][1]["logprobs"]["token_logprobs"];
  ASSERT_EQ(resp.logprob_size(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(second[i + 1].get<float>(), resp.logprob(i));
}

TEST(OpenAiE2eTest, FatalEngineErrorIs503AndExitsOne) {
  auto proc = StartOrDie({"--fault_inject=fatal_after:1", "--shutdown_grace_s=5"});
  ASSERT_NE(proc, nullptr);
  httplib::Client http("127.0.0.1", OpenAiPort(*proc));
  auto first = http.Post("/v1/completions", kCompletion, "application/json");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200);
  auto failed = http.Post("/v1/completions", kCompletion, "application/json");
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->status, 503);
  const Json error = Json::parse(failed->body)["error"];
  EXPECT_EQ(error["type"], "server_error");
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("injected fatal engine error"));
  // The listener stays up 2 s after the failure: health says so.
  auto health = http.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  auto code = proc->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
}

}  // namespace
}  // namespace scored

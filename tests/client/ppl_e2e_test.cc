// End-to-end: scored-ppl against the real `scored` daemon on the CPU backend serving stories260K-hf,
// checked against the float64 goldens of ../shared/data/stories260K-hf.
//
// Tolerances: the CPU reference backend computes in fp32 with fp64 reductions while the goldens are
// float64 throughout; SOURCE.md measured fp32-vs-float64 PPL differences of ~1e-7 relative on this model
// (3.69240416 vs 3.69240450), so 1e-5 relative on PPL leaves two orders of margin, and 1e-4 absolute on a
// per-token logprob covers fp32 logits (|logprob| < 20, fp32 epsilon 1.2e-7 times the logit range).
//
// SCORED_E2E_MAX_WINDOWS=K (a positive integer; the sanitizer stage, where the full runs take > 12 min)
// shortens the two WikiText runs: BinaryWikiTextChunks scores the first K of the 1,584 windows against the
// float64 per-window log-prob sums of reference_wikitext2_test_ppl.json over those K windows;
// ReferenceMethods scores 16 windows per method (whatever K is) against kShortMethodGoldens. The other tests
// are unchanged.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "client/ppl/dataset.h"
#include "client/ppl/report.h"
#include "client/ppl/run.h"
#include "client/ppl/scorer_client.h"
#include "client/ppl/windows.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e_windows.h"
#include "tests/server/scored_process.h"

namespace scored {
namespace ppl {
namespace {

constexpr double kPplRelTol = 1e-5;
constexpr double kLogprobAbsTol = 1e-4;

std::string DataDir() { return SCORED_DATA_DIR; }

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}
std::string WikiTest() { return DataDir() + "/wikitext-2-raw/wiki.test.raw"; }
std::string TinyStories() { return DataDir() + "/tinystories-sample/tinystories_sample.txt"; }

nlohmann::json ReadJson(const std::string& path) { return nlohmann::json::parse(ReadText(path)); }

using ::scored::testing::MaxWindowsFromEnv;

void ExpectRelNear(double actual, double expected, double rel, const std::string& what) {
  EXPECT_LE(std::fabs(actual - expected), rel * std::fabs(expected))
      << what << ": got " << actual << ", want " << expected << " within " << rel << " relative";
}

class PplE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::ScoredProcessOptions options;
    // max_seq_len 513: rolling at ctx 512 sends 513-token windows ([prefix] + 512 targets), one more
    // than the model's max_position_embeddings.
    options.args = {"--model=" + testing::StoriesModelDir(), "--backend=cpu", "--max_seq_len=513",
                    "--max_batch_tokens=16384"};
    auto process = testing::ScoredProcess::Start(options);
    if (!process.ok()) {
      *start_error_ = process.status().ToString();
      return;
    }
    process_ = process->release();
  }
  static void TearDownTestSuite() {
    delete process_;
    process_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(process_, nullptr) << "scored did not start: " << *start_error_; }

  static RunOptions Options(Method method, int64_t ctx, int64_t stride, int64_t max_windows) {
    RunOptions o;
    o.server = process_->grpc_address();
    o.data_path = WikiTest();
    o.format = Format::kWikiText;
    o.method.method = method;
    o.method.ctx = ctx;
    o.method.stride = stride;
    o.method.max_windows = max_windows;
    o.inflight = 8;
    return o;
  }

  static testing::ScoredProcess* process_;
  static std::string* start_error_;
};

testing::ScoredProcess* PplE2eTest::process_ = nullptr;
std::string* PplE2eTest::start_error_ = new std::string();

// The golden TinyStories ids cut by RollingWindows and scored over ScoreStream (no tokenizer involved):
// every per-token logprob within 1e-4 of reference_logprobs.json, per-story sums and the PPL within
// 1e-5 relative.
TEST_F(PplE2eTest, TinyStoriesGoldenIdsOverScoreStream) {
  const nlohmann::json golden = ReadJson(DataDir() + "/stories260K-hf/reference_logprobs.json");
  const nlohmann::json& stories = golden["tinystories_sample"]["stories"];

  ScorerClientOptions client_options;
  client_options.address = process_->grpc_address();
  auto client = ScorerClient::Connect(client_options);
  ASSERT_TRUE(client.ok()) << client.status();
  auto info = (*client)->GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->vocab_size(), 512);

  std::vector<Window> windows;
  for (const nlohmann::json& story : stories) {
    const auto ids = story["token_ids"].get<std::vector<int32_t>>();
    TokenStream doc;
    doc.ids.assign(ids.begin() + 1, ids.end());  // the golden ids start with BOS = 1
    auto w = RollingWindows(doc, 2048, 1);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].tokens, ids);
    windows.push_back(std::move(w[0]));
  }
  std::vector<WindowScore> scores(windows.size());
  Aggregator agg;
  const absl::Status scored =
      (*client)->ScoreWindows(windows, 2, /*want_reference=*/false, [&](int64_t i, const WindowScore& s) {
        scores[static_cast<size_t>(i)] = s;
        agg.AddWindow(s.sum_logprob, s.logprobs, -1);
      });
  ASSERT_TRUE(scored.ok()) << scored;
  for (size_t i = 0; i < stories.size(); ++i) {
    const auto lps = stories[i]["token_logprobs"].get<std::vector<double>>();
    ASSERT_EQ(scores[i].logprobs.size(), lps.size()) << "story " << i;
    double max_diff = 0;
    for (size_t j = 0; j < lps.size(); ++j) {
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(scores[i].logprobs[j]) - lps[j]));
    }
    EXPECT_LE(max_diff, kLogprobAbsTol) << "story " << i;
    ExpectRelNear(scores[i].sum_logprob, stories[i]["sum_logprob"].get<double>(), kPplRelTol,
                  "story sum_logprob");
  }
  EXPECT_EQ(agg.num_scored(), golden["tinystories_sample"]["total_scored"].get<int64_t>());
  ExpectRelNear(agg.Ppl(), golden["tinystories_sample"]["ppl"].get<double>(), kPplRelTol, "ppl");
}

// The whole run through the server's tokenizer: TinyStories sample, rolling, split on <|endoftext|>:
// PPL 3.692405 within 1e-5 relative over 1806 tokens in 5 windows.
TEST_F(PplE2eTest, TinyStoriesRolling) {
  RunOptions o = Options(Method::kRolling, 2048, 0, 0);
  o.data_path = TinyStories();
  o.format = Format::kText;
  o.separator = "<|endoftext|>";
  auto report = RunPpl(o);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->num_windows, 5);
  EXPECT_EQ(report->num_documents, 5);
  EXPECT_EQ(report->num_scored, 1806);
  EXPECT_EQ(report->prefix_id, 1);
  ExpectRelNear(report->ppl, 3.692404503454594, kPplRelTol, "ppl");
  ExpectRelNear(report->ppl, 3.692405, kPplRelTol, "ppl (published digits)");
  EXPECT_GT(report->bits_per_byte, 0.0);
}

// The first kShortMethodWindows windows of each method of reference_methods.json (same ctx and stride), for
// runs with SCORED_E2E_MAX_WINDOWS set. reference_methods.json holds only 100-window totals, so these come
// from this test's normal Release build (CPU backend, fp32), whose 100-window results match the float64
// goldens within 1e-5 relative: `SCORED_E2E_MAX_WINDOWS=16 ppl_e2e_test --gtest_filter=*ReferenceMethods*`
// prints them (the "[ measured ]" lines). A sanitized build must reproduce them within the same 1e-5.
constexpr int64_t kShortMethodWindows = 16;
struct MethodGolden {
  const char* method;
  int64_t num_scored;
  double sum_logprob;
};
constexpr MethodGolden kShortMethodGoldens[] = {
    {"exl3", 8176, -40063.43190886802},    {"gptq", 8176, -38272.663161787241},
    {"hf", 4351, -21623.246066512158},     {"llamacpp", 4080, -18867.237467113937},
    {"rolling", 8192, -38122.68811108511},
};

// Every method of reference_methods.json on wiki.test.raw (ctx 512, stride 256, 100 windows); with
// SCORED_E2E_MAX_WINDOWS set, the first 16 windows of each against kShortMethodGoldens.
TEST_F(PplE2eTest, ReferenceMethods) {
  const nlohmann::json golden = ReadJson(DataDir() + "/stories260K-hf/reference_methods.json");
  const int64_t max_windows = MaxWindowsFromEnv();
  ASSERT_GE(max_windows, 0) << "SCORED_E2E_MAX_WINDOWS must be a positive integer";
  const bool short_run = max_windows > 0;
  int checked = 0;
  for (const nlohmann::json& result : golden["results"]) {
    if (!result.contains("ppl")) continue;  // entries that point at other golden files
    const std::string name = result["method"].get<std::string>();
    SCOPED_TRACE(name);
    auto method = ParseMethod(name);
    ASSERT_TRUE(method.ok()) << method.status();
    const nlohmann::json& p = result["params"];
    int64_t want_windows = result["num_windows"].get<int64_t>();
    int64_t want_scored = result["num_scored"].get<int64_t>();
    double want_sum = result["sum_logprob"].get<double>();
    double want_ppl = result["ppl"].get<double>();
    if (short_run) {
      const MethodGolden* short_golden = nullptr;
      for (const MethodGolden& g : kShortMethodGoldens) {
        if (name == g.method) short_golden = &g;
      }
      ASSERT_NE(short_golden, nullptr);
      want_windows = kShortMethodWindows;
      want_scored = short_golden->num_scored;
      want_sum = short_golden->sum_logprob;
      want_ppl = std::exp(-want_sum / static_cast<double>(want_scored));
    }
    RunOptions o = Options(*method, p["ctx"].get<int64_t>(), p.value("stride", int64_t{0}),
                           short_run ? kShortMethodWindows : p.value("max_windows", int64_t{0}));
    auto report = RunPpl(o);
    ASSERT_TRUE(report.ok()) << report.status();
    std::printf("[ measured ] %s, %lld windows: num_scored %lld, sum_logprob %.17g, ppl %.17g\n",
                name.c_str(), static_cast<long long>(report->num_windows),
                static_cast<long long>(report->num_scored), report->sum_logprob, report->ppl);
    EXPECT_EQ(report->num_windows, want_windows);
    EXPECT_EQ(report->num_scored, want_scored);
    ExpectRelNear(report->sum_logprob, want_sum, kPplRelTol, "sum_logprob");
    ExpectRelNear(report->ppl, want_ppl, kPplRelTol, "ppl");
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}

// The scored-ppl binary as a subprocess: WikiText-2 test, chunks, ctx 512 (the whole file, 1584
// windows), PPL 125.704736 within 1e-5 relative; the --json report carries every field. With
// SCORED_E2E_MAX_WINDOWS=K: the first K windows (--max_windows K) against the same file's float64
// per-window sums.
TEST_F(PplE2eTest, BinaryWikiTextChunks) {
  const nlohmann::json golden = ReadJson(DataDir() + "/stories260K-hf/reference_wikitext2_test_ppl.json");
  const int64_t all_windows = golden["n_windows"].get<int64_t>();
  const int64_t max_windows = MaxWindowsFromEnv();
  ASSERT_GE(max_windows, 0) << "SCORED_E2E_MAX_WINDOWS must be a positive integer";
  const bool whole_file = max_windows == 0 || max_windows >= all_windows;
  int64_t want_windows = all_windows;
  int64_t want_scored = golden["n_scored"].get<int64_t>();
  double want_sum = golden["sum_logprob"].get<double>();
  double want_ppl = golden["ppl"].get<double>();
  if (!whole_file) {
    // Every window but the last holds 511 scored tokens (chunks of ctx 512 = BOS + 511).
    const std::vector<double> window_sums = golden["window_sum_logprob"].get<std::vector<double>>();
    want_windows = max_windows;
    want_scored = max_windows * 511;
    want_sum = 0.0;
    for (int64_t w = 0; w < max_windows; ++w) want_sum += window_sums[static_cast<size_t>(w)];
    want_ppl = std::exp(-want_sum / static_cast<double>(want_scored));
  }
  const std::string dir = ::testing::TempDir();
  const std::string json_path = dir + "/ppl_e2e_chunks.json";
  const std::string out_path = dir + "/ppl_e2e_chunks.out";
  const std::string err_path = dir + "/ppl_e2e_chunks.err";
  std::remove(json_path.c_str());
  const std::string cmd = std::string(SCORED_BINARY_DIR) + "/client/ppl/scored-ppl --server " +
                          process_->grpc_address() + " --data " + WikiTest() +
                          " --method chunks --ctx 512 --inflight 8 --progress --json " + json_path +
                          (whole_file ? "" : " --max_windows " + std::to_string(max_windows)) + " > " +
                          out_path + " 2> " + err_path;
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << ReadText(err_path);
  EXPECT_NE(ReadText(out_path).find("ppl"), std::string::npos);

  const nlohmann::json r = ReadJson(json_path);
  EXPECT_EQ(r["num_windows"].get<int64_t>(), want_windows);
  EXPECT_EQ(r["num_scored"].get<int64_t>(), want_scored);
  EXPECT_EQ(r["data"]["num_input_tokens"].get<int64_t>(), golden["n_tokens"].get<int64_t>());
  ExpectRelNear(r["ppl"].get<double>(), want_ppl, kPplRelTol, "ppl");
  if (whole_file) ExpectRelNear(r["ppl"].get<double>(), 125.704736, kPplRelTol, "ppl (published digits)");
  ExpectRelNear(r["sum_logprob"].get<double>(), want_sum, kPplRelTol, "sum_logprob");
  EXPECT_EQ(r["method"]["name"], "chunks");
  EXPECT_EQ(r["method"]["ctx"].get<int64_t>(), 512);
  EXPECT_EQ(r["method"]["prefix_id"].get<int32_t>(), 1);
  EXPECT_EQ(r["data"]["format"], "wikitext");
  EXPECT_NEAR(r["nll_mean"].get<double>(), std::log(r["ppl"].get<double>()), 1e-12);
  EXPECT_GT(r["nll_stderr"].get<double>(), 0.0);
  // A standard error shrinks as 1/sqrt(tokens): the whole file's bound, widened for fewer windows.
  EXPECT_LT(r["nll_stderr"].get<double>(),
            0.01 * std::sqrt(static_cast<double>(golden["n_scored"].get<int64_t>()) / want_scored));
  // Bytes: every scored token's bytes once (each token is scored exactly once here), so close to the
  // file's 1,290,590 bytes (SentencePiece's dummy-prefix space adds one); at least one byte per scored
  // token for the first K windows.
  if (whole_file) {
    EXPECT_GT(r["num_bytes"].get<int64_t>(), 1200000);
  } else {
    EXPECT_GE(r["num_bytes"].get<int64_t>(), want_scored);
  }
  EXPECT_GT(r["bits_per_byte"].get<double>(), 0.0);
  EXPECT_GT(r["wall_seconds"].get<double>(), 0.0);
  EXPECT_GT(r["tokens_per_second"].get<double>(), 0.0);
  EXPECT_EQ(r["model_fingerprint"].get<std::string>().size(), 64u);
  EXPECT_EQ(r["tokenizer_fingerprint"].get<std::string>().size(), 64u);
  EXPECT_EQ(r["tokenizer_source"], "server");
  EXPECT_EQ(r["model_info"]["vocab_size"], 512);  // int64 fields are JSON numbers, not proto3 JSON strings
  std::printf("[ measured ] chunks ctx 512 on the CPU backend: %.0f tokens/s, %.1f s wall\n",
              r["tokens_per_second"].get<double>(), r["wall_seconds"].get<double>());
}

// A one-document file longer than the server's --max_text_bytes (4 MiB by default): four copies of WikiText-2
// test, 5.2 MB, tokenized through the server in pieces, give the ids of one local tokenization (the same
// token and byte counts, the same scored windows). It failed with OUT_OF_RANGE before.
TEST_F(PplE2eTest, LongDocumentTokenizedByTheServerInPieces) {
  const std::string wiki = ReadText(WikiTest());
  const std::string path = ::testing::TempDir() + "/ppl_e2e_long_document.txt";
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 4; ++i) out << wiki;
  }
  RunOptions o = Options(Method::kLlamaCpp, 512, 0, 8);
  o.data_path = path;
  o.format = Format::kText;
  auto server = RunPpl(o);
  ASSERT_TRUE(server.ok()) << server.status();
  o.tokenizer_dir = testing::StoriesModelDir();
  auto local = RunPpl(o);
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(server->tokenizer_source, "server");
  EXPECT_EQ(server->num_documents, 1);
  EXPECT_GT(server->num_input_tokens, 4 * 280000);
  EXPECT_EQ(server->num_input_tokens, local->num_input_tokens);
  EXPECT_EQ(server->num_scored, local->num_scored);
  EXPECT_EQ(server->num_bytes, local->num_bytes);
  EXPECT_EQ(server->sum_logprob, local->sum_logprob);
  std::remove(path.c_str());
}

// scored-ppl --model: a scored of its own (the build tree's, found beside scored-ppl) started on the model,
// scored against, and stopped: the same numbers as a run against a running server with the same flags, and
// nothing left listening afterwards.
TEST_F(PplE2eTest, ModelFlagRunsAServerOfItsOwn) {
  const std::string dir = ::testing::TempDir();
  const std::string json_path = dir + "/ppl_e2e_own_server.json";
  const std::string err_path = dir + "/ppl_e2e_own_server.err";
  const std::string cmd =
      std::string(SCORED_BINARY_DIR) + "/client/ppl/scored-ppl --model " + testing::StoriesModelDir() +
      " --scored_args '--backend=cpu --max_seq_len=513' --data " + WikiTest() +
      " --method gptq --ctx 512 --max_windows 8 --quiet --json " + json_path + " 2> " + err_path;
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << ReadText(err_path);
  const nlohmann::json own = ReadJson(json_path);
  auto served = RunPpl(Options(Method::kGptq, 512, 0, 8));
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(own["num_scored"].get<int64_t>(), served->num_scored);
  EXPECT_EQ(own["sum_logprob"].get<double>(), served->sum_logprob);
  // "scored serves MODEL on 127.0.0.1:PORT": that port is closed once scored-ppl returned.
  const std::string err = ReadText(err_path);
  const size_t at = err.find(" on 127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << err;
  const int port = std::atoi(err.c_str() + at + std::strlen(" on 127.0.0.1:"));
  ASSERT_GT(port, 0) << err;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_NE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << "scored still listens";
  ::close(fd);
}

// A gzip-compressed data file (as C4's shards ship) scores as its text: the same ids and sums as the plain
// file. Before, it failed with "not valid UTF-8 ... (byte 0x8b)".
TEST_F(PplE2eTest, GzipDataScoresAsItsText) {
  const std::string path = ::testing::TempDir() + "/ppl_e2e_wiki.test.raw.gz";
  {
    const std::string wiki = ReadText(WikiTest());
    gzFile out = gzopen(path.c_str(), "wb");
    ASSERT_NE(out, nullptr);
    ASSERT_EQ(gzwrite(out, wiki.data(), static_cast<unsigned>(wiki.size())), static_cast<int>(wiki.size()));
    ASSERT_EQ(gzclose(out), Z_OK);
  }
  RunOptions o = Options(Method::kGptq, 512, 0, 8);
  auto plain = RunPpl(o);
  ASSERT_TRUE(plain.ok()) << plain.status();
  o.data_path = path;
  o.format = FormatForPath(path);
  EXPECT_EQ(o.format, Format::kWikiText);
  auto gzipped = RunPpl(o);
  ASSERT_TRUE(gzipped.ok()) << gzipped.status();
  EXPECT_EQ(gzipped->num_input_tokens, plain->num_input_tokens);
  EXPECT_EQ(gzipped->num_bytes, plain->num_bytes);
  EXPECT_EQ(gzipped->num_scored, plain->num_scored);
  EXPECT_EQ(gzipped->sum_logprob, plain->sum_logprob);
  std::remove(path.c_str());
}

// The methods' default --ctx (2048) against this server's max_seq_len 513: shortened to what it accepts
// (rolling: 512 targets + the prefix), instead of failing on the first window.
TEST_F(PplE2eTest, DefaultCtxFitsTheServer) {
  for (const auto& [method, want_ctx] : {std::pair{Method::kExl3, 513}, std::pair{Method::kRolling, 512}}) {
    RunOptions o = Options(method, 2048, method == Method::kExl3 ? 512 : 0, 2);
    o.ctx_is_default = true;
    o.stride_is_default = true;
    auto report = RunPpl(o);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->method.ctx, want_ctx);
    EXPECT_EQ(report->num_windows, 2);
  }
  // An explicit --ctx is kept, and refused as before.
  auto refused = RunPpl(Options(Method::kExl3, 2048, 512, 2));
  EXPECT_FALSE(refused.ok());
}

// A window longer than the server's max_seq_len (513 here) is refused before anything is scored, with
// a message that names the limit.
TEST_F(PplE2eTest, WindowOverServerLimitFailsBeforeScoring) {
  auto report = RunPpl(Options(Method::kGptq, 2048, 0, 1));
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(report.status().message().find("max_seq_len 513"), std::string::npos) << report.status();
}

// A request the server rejects ends ScoreWindows with the server's code and the window's index, even
// with other windows in flight.
TEST_F(PplE2eTest, RejectedWindowEndsTheStream) {
  ScorerClientOptions client_options;
  client_options.address = process_->grpc_address();
  auto client = ScorerClient::Connect(client_options);
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<Window> windows(40);
  for (Window& w : windows) w.tokens = {1, 400, 401, 402};
  windows[17].tokens[2] = 512;  // one past the vocabulary
  int64_t results = 0;
  const absl::Status status = (*client)->ScoreWindows(windows, 8, /*want_reference=*/false,
                                                      [&](int64_t, const WindowScore&) { ++results; });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("window 17"), std::string::npos) << status;
  EXPECT_LT(results, 40);
}

// An unreachable server: non-zero exit and a message that says so, within the connect deadline.
TEST(PplBinaryTest, UnreachableServerFailsClearly) {
  const std::string err_path = ::testing::TempDir() + "/ppl_e2e_unreachable.err";
  const std::string cmd = std::string(SCORED_BINARY_DIR) +
                          "/client/ppl/scored-ppl --server 127.0.0.1:1 --connect_timeout_s 1 --data " +
                          WikiTest() + " > /dev/null 2> " + err_path;
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string err = ReadText(err_path);
  EXPECT_NE(err.find("cannot connect to scored at 127.0.0.1:1"), std::string::npos) << err;
}

}  // namespace
}  // namespace ppl
}  // namespace scored

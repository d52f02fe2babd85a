// Unit tests of the server's pure logic: request validation (every bad input, fixed code mapping and
// message), option checks, the absl -> gRPC code mapping, the metrics exposition, the security
// helpers (loopback detection, constant-time compare, bearer-token check) and --fault_inject parsing.
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/batcher.h"
#include "server/fault_injection.h"
#include "server/grpc_status.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/request_validation.h"
#include "server/security.h"

namespace scored {
namespace {

using ::testing::HasSubstr;

ScoreLimits Limits() {
  ScoreLimits l;
  l.max_seq_len = 512;
  l.max_batch_tokens = 256;
  l.vocab_size = 512;
  return l;
}

v1::ScoreRequest TokensRequest(const std::vector<int32_t>& ids) {
  v1::ScoreRequest r;
  r.mutable_tokens();  // set the oneof even for an empty list
  for (int32_t id : ids) r.mutable_tokens()->add_ids(id);
  return r;
}

void ExpectError(const v1::ScoreRequest& r, absl::StatusCode code, const std::string& fragment) {
  absl::StatusOr<ScoreRequest> got = ToEngineRequest(r, Limits(), nullptr);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), code) << got.status();
  EXPECT_THAT(std::string(got.status().message()), HasSubstr(fragment));
}

TEST(RequestValidationTest, AcceptsValidRequestAndClampsScoreFrom) {
  v1::ScoreRequest r = TokensRequest({1, 2, 3, 511});
  r.set_top_k(64);
  r.set_want_rank(true);
  auto got = ToEngineRequest(r, Limits(), nullptr);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->tokens, (std::vector<int32_t>{1, 2, 3, 511}));
  EXPECT_EQ(got->score_from, 1);  // default 0 acts as 1
  EXPECT_EQ(got->top_k, 64);
  EXPECT_TRUE(got->want_rank);
  r.set_score_from(-5);
  EXPECT_EQ(ToEngineRequest(r, Limits(), nullptr)->score_from, 1);
  r.set_score_from(3);
  EXPECT_EQ(ToEngineRequest(r, Limits(), nullptr)->score_from, 3);
}

TEST(RequestValidationTest, NeitherTokensNorText) {
  ExpectError(v1::ScoreRequest(), absl::StatusCode::kInvalidArgument, "exactly one of `tokens` or `text`");
}

TEST(RequestValidationTest, TooFewTokens) {
  ExpectError(TokensRequest({}), absl::StatusCode::kInvalidArgument,
              "at least 2 tokens (the first is context only); got 0");
  ExpectError(TokensRequest({1}), absl::StatusCode::kInvalidArgument,
              "at least 2 tokens (the first is context only); got 1");
}

TEST(RequestValidationTest, LongerThanMaxSeqLen) {
  ScoreLimits l = Limits();
  l.max_batch_tokens = 4096;
  v1::ScoreRequest r = TokensRequest(std::vector<int32_t>(513, 5));
  auto got = ToEngineRequest(r, l, nullptr);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("513 tokens; max_seq_len is 512"));
}

TEST(RequestValidationTest, LongerThanMaxBatchTokens) {
  ExpectError(TokensRequest(std::vector<int32_t>(300, 5)), absl::StatusCode::kOutOfRange,
              "300 tokens; max_batch_tokens is 256");
}

TEST(RequestValidationTest, ScoreFromNotBeforeEnd) {
  v1::ScoreRequest r = TokensRequest({1, 2, 3});
  r.set_score_from(3);
  ExpectError(r, absl::StatusCode::kInvalidArgument, "score_from 3 must be less than the number of tokens 3");
  r.set_score_from(100);
  ExpectError(r, absl::StatusCode::kInvalidArgument, "score_from 100");
}

TEST(RequestValidationTest, TopKOutOfRange) {
  v1::ScoreRequest r = TokensRequest({1, 2, 3});
  r.set_top_k(1025);
  ExpectError(r, absl::StatusCode::kInvalidArgument, "top_k must be in [0, 1024], got 1025");
  r.set_top_k(513);  // within the contract's 1024, beyond this vocabulary
  ExpectError(r, absl::StatusCode::kInvalidArgument, "top_k 513 exceeds the vocabulary size 512");
  r.set_top_k(-1);
  ExpectError(r, absl::StatusCode::kInvalidArgument, "got -1");
}

TEST(RequestValidationTest, TokenIdOutOfVocabularyNamesPositionAndId) {
  ExpectError(TokensRequest({1, 2, 3, 512}), absl::StatusCode::kInvalidArgument,
              "token id 512 at position 3 is out of range [0, 512)");
  ExpectError(TokensRequest({1, -7, 3}), absl::StatusCode::kInvalidArgument,
              "token id -7 at position 1 is out of range [0, 512)");
}

TEST(RequestValidationTest, TextWithoutTokenizerIsFailedPrecondition) {
  v1::ScoreRequest r;
  r.mutable_text()->set_text("hello");
  ExpectError(r, absl::StatusCode::kFailedPrecondition, "tokenizer");
}

TEST(RequestValidationTest, FillScoreResponseCopiesEveryField) {
  ScoreRequest req;
  req.tokens = {1, 5, 9};
  req.score_from = 1;
  req.want_rank = true;
  req.want_entropy = true;
  req.top_k = 1;
  ScoreResult res;
  res.logprob = {-1.5f, -0.25f};
  res.greedy = {0, 1};
  res.rank = {3, 1};
  res.entropy = {2.0f, 0.5f};
  res.top_k = {{{7, -0.1f}}, {{9, -0.25f}}};
  res.sum_logprob = -1.75;
  res.num_scored = 2;
  v1::ScoreResponse resp;
  FillScoreResponse(req, res, /*echo_tokens=*/true, 42, &resp);
  EXPECT_EQ(resp.request_id(), 42u);
  EXPECT_THAT(resp.tokens(), ::testing::ElementsAre(1, 5, 9));
  EXPECT_EQ(resp.first_scored(), 1);
  EXPECT_THAT(resp.logprob(), ::testing::ElementsAre(-1.5f, -0.25f));
  EXPECT_THAT(resp.greedy(), ::testing::ElementsAre(false, true));
  EXPECT_THAT(resp.rank(), ::testing::ElementsAre(3, 1));
  EXPECT_THAT(resp.entropy(), ::testing::ElementsAre(2.0f, 0.5f));
  ASSERT_EQ(resp.top_k_size(), 2);
  EXPECT_EQ(resp.top_k(1).tokens(0).id(), 9);
  EXPECT_EQ(resp.sum_logprob(), -1.75);
  EXPECT_EQ(resp.num_scored(), 2);
  v1::ScoreResponse no_echo;
  FillScoreResponse(req, res, /*echo_tokens=*/false, 1, &no_echo);
  EXPECT_EQ(no_echo.tokens_size(), 0);
}

ServerOptions GoodOptions() {
  ServerOptions o;
  o.engine.model_dir = "/some/model";
  o.engine.backend = Backend::kCpu;
  return o;
}

void ExpectBadOptions(const ServerOptions& o, const std::string& fragment) {
  absl::Status s = ValidateServerOptions(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(fragment));
}

TEST(ServerOptionsTest, ValidatesEveryFlag) {
  EXPECT_TRUE(ValidateServerOptions(GoodOptions()).ok());
  ServerOptions o = GoodOptions();
  o.engine.model_dir = "";
  ExpectBadOptions(o, "--model is required");
  o = GoodOptions();
  o.engine.tp = 0;
  ExpectBadOptions(o, "--tp must be in [1, 256], got 0");
  o = GoodOptions();
  o.engine.tp = 2;
  ExpectBadOptions(o, "needs --backend=cuda");
  o = GoodOptions();
  o.engine.tp_row_chunks = 9;
  ExpectBadOptions(o, "--tp_row_chunks must be in [0, 8] (0 = auto), got 9");
  o.engine.tp_row_chunks = -1;
  ExpectBadOptions(o, "--tp_row_chunks must be in [0, 8]");
  o = GoodOptions();
  o.engine.max_batch_tokens = 1;
  ExpectBadOptions(o, "--max_batch_tokens must be in [2, 16777216], got 1");
  o = GoodOptions();
  o.engine.max_seq_len = -3;
  ExpectBadOptions(o, "--max_seq_len");
  o = GoodOptions();
  o.engine.max_seq_len = 20000;
  ExpectBadOptions(o, "exceeds --max_batch_tokens");
  o = GoodOptions();
  o.max_queue = 0;
  ExpectBadOptions(o, "--max_queue must be in [1, 65536], got 0");
  o = GoodOptions();
  o.batch_timeout = absl::Microseconds(-1);
  ExpectBadOptions(o, "--batch_timeout_us");
  o = GoodOptions();
  o.stream_window = 0;
  ExpectBadOptions(o, "--stream_window");
  o = GoodOptions();
  o.listen = "localhost";
  ExpectBadOptions(o, "--listen must be host:port");
  o = GoodOptions();
  o.listen = "127.0.0.1:70000";
  ExpectBadOptions(o, "port must be an integer in [0, 65535]");
  o = GoodOptions();
  o.metrics_listen = "127.0.0.1:x";
  ExpectBadOptions(o, "--metrics_listen");
  o = GoodOptions();
  o.metrics_listen = "";
  EXPECT_TRUE(ValidateServerOptions(o).ok());
  o.listen = "[::1]:0";
  EXPECT_TRUE(ValidateServerOptions(o).ok());
}

// Every numeric flag: the value just below its range, the bounds themselves, and just above.
TEST(ServerOptionsTest, EveryNumericFlagHasARangeNamedInItsMessage) {
  struct Flag {
    std::string message;  // the expected message fragment for an out-of-range value
    std::function<void(ServerOptions*, int64_t)> set;
    int64_t lo, hi;
  };
  const std::vector<Flag> flags = {
      {"--tp must be in [1, 256]", [](ServerOptions* o, int64_t v) { o->engine.tp = static_cast<int>(v); }, 1,
       256},
      {"--num_threads must be in [0, 1024] (0 = the usable CPUs)",
       [](ServerOptions* o, int64_t v) { o->engine.num_threads = static_cast<int>(v); }, 0, 1024},
      {"--max_batch_tokens must be in [2, 16777216]",
       [](ServerOptions* o, int64_t v) { o->engine.max_batch_tokens = v; }, 2, 16777216},
      {"--max_queue must be in [1, 65536]", [](ServerOptions* o, int64_t v) { o->max_queue = v; }, 1, 65536},
      {"--stream_window must be in [1, 1024]",
       [](ServerOptions* o, int64_t v) { o->stream_window = static_cast<int>(v); }, 1, 1024},
      {"--tp_row_chunks must be in [0, 8] (0 = auto)",
       [](ServerOptions* o, int64_t v) { o->engine.tp_row_chunks = static_cast<int>(v); }, 0, 8},
      {"--batch_timeout_us must be in [0, 10000000]",
       [](ServerOptions* o, int64_t v) { o->batch_timeout = absl::Microseconds(v); }, 0, 10000000},
      {"--shutdown_grace_s must be in [0, 3600] seconds",
       [](ServerOptions* o, int64_t v) { o->shutdown_grace = absl::Seconds(v); }, 0, 3600},
      {"--rendezvous_timeout_s must be in [1, 86400]",
       [](ServerOptions* o, int64_t v) { o->rendezvous_timeout = absl::Seconds(v); }, 1, 86400},
      {"--max_message_bytes must be in [1024, 2147483647]",
       [](ServerOptions* o, int64_t v) { o->max_message_bytes = v; }, 1024, 2147483647},
      // Text limits.
      {"--max_text_bytes must be in [1, 536870912]",
       [](ServerOptions* o, int64_t v) { o->max_text_bytes = v; }, 1, 536870912},
      {"--tokenize_threads must be in [1, 64]",
       [](ServerOptions* o, int64_t v) { o->tokenize_threads = static_cast<int>(v); }, 1, 64},
      {"--tokenize_queue must be in [1, 65536]",
       [](ServerOptions* o, int64_t v) { o->tokenize_queue = static_cast<int>(v); }, 1, 65536},
  };
  for (const Flag& f : flags) {
    for (int64_t v : {f.lo, f.hi}) {
      ServerOptions o = GoodOptions();
      o.engine.backend = Backend::kCuda;  // --tp > 1 needs it
      f.set(&o, v);
      EXPECT_TRUE(ValidateServerOptions(o).ok())
          << f.message << " at " << v << ": " << ValidateServerOptions(o);
    }
    for (int64_t v : {f.lo - 1, f.hi + 1, int64_t{-1000000}, int64_t{100000000000}}) {
      if (v >= f.lo && v <= f.hi) continue;
      ServerOptions o = GoodOptions();
      o.engine.backend = Backend::kCuda;
      f.set(&o, v);
      ExpectBadOptions(o, f.message);
    }
  }
  // The case, with the value in the message.
  ServerOptions o = GoodOptions();
  o.engine.num_threads = 100000;
  ExpectBadOptions(o, "--num_threads must be in [0, 1024] (0 = the usable CPUs), got 100000");
  // max_seq_len: 0 (the model's context) or 2..max_batch_tokens.
  o = GoodOptions();
  o.engine.max_seq_len = 1;
  ExpectBadOptions(o, "--max_seq_len must be in [2, 16777216] or 0 (the model's context), got 1");
  o.engine.max_seq_len = 16384;
  EXPECT_TRUE(ValidateServerOptions(o).ok());
  o.engine.max_seq_len = 16385;
  ExpectBadOptions(o, "--max_seq_len 16385 exceeds --max_batch_tokens 16384");
  // A NaN or infinite --shutdown_grace_s becomes an infinite duration (absl::Seconds), refused too.
  o = GoodOptions();
  o.shutdown_grace = absl::Seconds(std::numeric_limits<double>::quiet_NaN());
  ExpectBadOptions(o, "--shutdown_grace_s must be in [0, 3600]");
  o.shutdown_grace = absl::Seconds(-std::numeric_limits<double>::infinity());
  ExpectBadOptions(o, "--shutdown_grace_s must be in [0, 3600]");
  // --nnodes: 1..256 whatever --tp says (then it must divide --tp).
  o = GoodOptions();
  o.engine.backend = Backend::kCuda;
  o.engine.nnodes = 257;
  ExpectBadOptions(o, "--nnodes must be in [1, 256], got 257");
  // Ports: 0..65535.
  o = GoodOptions();
  o.listen = "127.0.0.1:65535";
  EXPECT_TRUE(ValidateServerOptions(o).ok());
  o.listen = "127.0.0.1:-1";
  ExpectBadOptions(o, "--listen: port must be an integer in [0, 65535]");
  o = GoodOptions();
  o.metrics_listen = "127.0.0.1:65536";
  ExpectBadOptions(o, "--metrics_listen: port must be an integer in [0, 65535]");
}

TEST(ServerOptionsTest, MultiProcessFlags) {
  ServerOptions o = GoodOptions();
  o.engine.nnodes = 0;
  ExpectBadOptions(o, "--nnodes must be in [1, 256], got 0");
  o = GoodOptions();
  o.engine.node_rank = 1;
  ExpectBadOptions(o, "--node_rank must be in [0, --nnodes) = [0, 1), got 1");
  o = GoodOptions();
  o.engine.node_rank = -1;
  ExpectBadOptions(o, "--node_rank must be in");
  o = GoodOptions();
  o.engine.rendezvous = "10.0.0.1:29500";
  ExpectBadOptions(o, "--rendezvous is for multi-process tensor parallelism");

  // A valid 2-node configuration, then one flaw at a time.
  ServerOptions good = GoodOptions();
  good.engine.backend = Backend::kCuda;
  good.engine.tp = 4;
  good.engine.nnodes = 2;
  good.engine.node_rank = 1;
  good.engine.rendezvous = "scored-mh-0.scored-mh:29500";
  EXPECT_TRUE(ValidateServerOptions(good).ok()) << ValidateServerOptions(good);
  o = good;
  o.engine.node_rank = 2;
  ExpectBadOptions(o, "--node_rank must be in [0, --nnodes) = [0, 2), got 2");
  o = good;
  o.engine.backend = Backend::kCpu;
  o.engine.tp = 1;
  ExpectBadOptions(o, "--nnodes 2 needs --backend=cuda");
  o = good;
  o.engine.tp = 3;
  ExpectBadOptions(o, "--tp 3 is not a multiple of --nnodes 2");
  o = good;
  o.engine.rendezvous = "";
  ExpectBadOptions(o, "--nnodes 2 needs --rendezvous=HOST:PORT");
  o = good;
  o.engine.rendezvous = "scored-mh-0";
  ExpectBadOptions(o, "--rendezvous must be host:port");
  o = good;
  o.engine.rendezvous = "10.0.0.1:0";
  ExpectBadOptions(o, "--rendezvous needs a port > 0");
  o = good;
  o.engine.rendezvous = "[fd00::1]:29500";
  EXPECT_TRUE(ValidateServerOptions(o).ok());
  o = good;
  o.rendezvous_timeout = absl::ZeroDuration();
  ExpectBadOptions(o, "--rendezvous_timeout_s must be in [1, 86400], got 0");
  o.rendezvous_timeout = absl::Hours(25);
  ExpectBadOptions(o, "--rendezvous_timeout_s must be in [1, 86400]");
  o.rendezvous_timeout = absl::Seconds(1);
  EXPECT_TRUE(ValidateServerOptions(o).ok());
  // A follower listens on nothing: an insecure remote --listen (shared pod args) is no concern there,
  // but still is on the leader.
  o = good;
  o.listen = "0.0.0.0:50051";
  EXPECT_TRUE(ValidateServerOptions(o).ok());
  o.engine.node_rank = 0;
  ExpectBadOptions(o, "is not a loopback address");
}

TEST(ServerOptionsTest, ParsesBackendAndDtype) {
  EXPECT_EQ(*ParseBackend("cpu"), Backend::kCpu);
  EXPECT_EQ(*ParseBackend("cuda"), Backend::kCuda);
  EXPECT_EQ(*ParseBackend(""), Backend::kAuto);
  EXPECT_THAT(std::string(ParseBackend("tpu").status().message()),
              HasSubstr("--backend must be cuda or cpu"));
  EXPECT_EQ(*ParseComputeDtype("bf16"), ComputeDtype::kBf16);
  EXPECT_EQ(*ParseComputeDtype("fp32"), ComputeDtype::kFp32);
  EXPECT_THAT(std::string(ParseComputeDtype("fp16").status().message()),
              HasSubstr("--dtype must be bf16 or fp32"));
  EXPECT_EQ(*ParseTpExchange("copy"), TpExchange::kCopy);
  EXPECT_EQ(*ParseTpExchange("nccl"), TpExchange::kNccl);
  EXPECT_THAT(std::string(ParseTpExchange("shared-memory").status().message()),
              HasSubstr("--tp_exchange must be copy or nccl, got 'shared-memory'"));
  EXPECT_EQ(*ParseMoeGemm("mma"), MoeGemm::kMma);
  EXPECT_EQ(*ParseMoeGemm("sm90"), MoeGemm::kSm90);
  EXPECT_EQ(*ParseMoeGemm("sm90_dequant"), MoeGemm::kSm90Dequant);
  EXPECT_EQ(ParseMoeGemm("wgmma").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ParseMoeGemm("wgmma").status().message()),
              HasSubstr("--moe_gemm must be mma, sm90 or sm90_dequant, got 'wgmma'"));
  EXPECT_EQ(*ParseMoeSm90Schedule("cooperative"), MoeSm90Schedule::kCooperative);
  EXPECT_EQ(*ParseMoeSm90Schedule("cooperative2x1"), MoeSm90Schedule::kCooperative2x1);
  EXPECT_EQ(*ParseMoeSm90Schedule("pingpong"), MoeSm90Schedule::kPingpong);
  EXPECT_THAT(std::string(ParseMoeSm90Schedule("").status().message()),
              HasSubstr("--moe_sm90_schedule must be cooperative, cooperative2x1 or pingpong, got ''"));
  // The defaults are the flags' defaults.
  const EngineOptions defaults;
  EXPECT_EQ(defaults.moe_gemm, MoeGemm::kSm90Dequant);
  EXPECT_EQ(defaults.moe_sm90_schedule, MoeSm90Schedule::kCooperative);
}

TEST(ServerOptionsTest, AutoBackendResolvesToACompiledInOne) {
  const Backend resolved = ResolveBackend(Backend::kAuto);
  EXPECT_EQ(resolved, CudaBackendAvailable() ? Backend::kCuda : Backend::kCpu);
  EXPECT_EQ(ResolveBackend(Backend::kCpu), Backend::kCpu);
  EXPECT_EQ(ResolveBackend(Backend::kCuda), Backend::kCuda);
}

TEST(GrpcStatusTest, MapsEveryCodeAndKeepsTheMessage) {
  for (int c = 0; c <= 16; ++c) {
    const auto code = static_cast<absl::StatusCode>(c);
    EXPECT_EQ(static_cast<int>(ToGrpcCode(code)), c);
  }
  grpc::Status g = ToGrpcStatus(absl::OutOfRangeError("too long"));
  EXPECT_EQ(g.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_EQ(g.error_message(), "too long");
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_EQ(ToGrpcCode(static_cast<absl::StatusCode>(99)), grpc::StatusCode::UNKNOWN);
  EXPECT_STREQ(GrpcCodeName(grpc::StatusCode::RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
}

// A result with a NaN or an infinity is an INTERNAL error naming the sequence position of the first one.
TEST(FiniteResultTest, NamesThePositionOfTheFirstNonFiniteValue) {
  ScoreRequest request;
  request.tokens = {1, 2, 3, 4, 5, 6, 7};
  request.score_from = 3;  // positions 3..6
  ScoreResult result;
  result.logprob = {-1.0f, -2.5f, -0.1f, -7.0f};
  result.num_scored = 4;
  EXPECT_TRUE(CheckFiniteResult(request, result).ok());
  result.entropy = {0.5f, 1.0f, 2.0f, 0.0f};
  result.top_k = {{{1, -0.5f}}, {{2, -1.0f}}, {{3, -0.1f}}, {{4, -3.0f}}};
  EXPECT_TRUE(CheckFiniteResult(request, result).ok());

  ScoreResult nan = result;
  nan.logprob[2] = std::numeric_limits<float>::quiet_NaN();
  nan.logprob[3] = std::numeric_limits<float>::quiet_NaN();
  absl::Status s = CheckFiniteResult(request, nan);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(),
            "non-finite log-probability (nan) at position 5 (NaN/Inf in the model's activations)");

  ScoreResult inf = result;
  inf.logprob[0] = -std::numeric_limits<float>::infinity();
  EXPECT_THAT(std::string(CheckFiniteResult(request, inf).message()),
              HasSubstr("non-finite log-probability (-inf) at position 3"));
  ScoreResult entropy = result;
  entropy.entropy[1] = std::numeric_limits<float>::infinity();
  EXPECT_THAT(std::string(CheckFiniteResult(request, entropy).message()),
              HasSubstr("non-finite entropy (inf) at position 4"));
  ScoreResult top_k = result;
  top_k.top_k[3][0].logprob = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(std::string(CheckFiniteResult(request, top_k).message()),
              HasSubstr("non-finite top-k log-probability (nan) at position 6"));
  ScoreResult reference = result;
  reference.ref_logprob = {-1.0f, -2.0f, -3.0f, -4.0f};
  reference.kld = {0.0f, 0.1f, 0.2f, 0.3f};
  EXPECT_TRUE(CheckFiniteResult(request, reference).ok());
  reference.kld[2] = std::numeric_limits<float>::infinity();
  EXPECT_THAT(std::string(CheckFiniteResult(request, reference).message()),
              HasSubstr("non-finite KL divergence (inf) at position 5"));
  reference.ref_logprob[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(std::string(CheckFiniteResult(request, reference).message()),
              HasSubstr("non-finite reference log-probability (nan) at position 4"));
  // score_from below 1 acts as 1.
  request.score_from = 0;
  EXPECT_THAT(std::string(CheckFiniteResult(request, nan).message()), HasSubstr("at position 3"));
}

TEST(MetricsTest, ExposesEveryFamily) {
  auto m = Metrics::Create("");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->port(), 0);
  ModelInfo info;
  info.architecture = "LlamaForCausalLM";
  info.format = "dense-f32";
  info.backend = "cpu";
  info.compute_dtype = "fp32";
  info.model_fingerprint = "508d5a3d";
  (*m)->SetModelInfo(info, "stories260K-hf");
  (*m)->RecordRequest("Score", grpc::StatusCode::OK, 0.01);
  (*m)->RecordRequest("Score", grpc::StatusCode::INVALID_ARGUMENT, 0.001);
  (*m)->RecordBatch(300, 299);
  (*m)->SetQueueDepth(3);
  (*m)->SetDeviceMemory({{100, 1000}});
  EXPECT_THAT((*m)->Serialize(), HasSubstr("scored_nonfinite_results_total 0")) << "present from the start";
  (*m)->RecordNonFiniteResult();
  (*m)->RecordNonFiniteResult();
  const std::string text = (*m)->Serialize();
  EXPECT_THAT(text, HasSubstr("scored_nonfinite_results_total 2"));
  EXPECT_THAT(text, HasSubstr("scored_requests_total{code=\"OK\",method=\"Score\"} 1"));
  EXPECT_THAT(text, HasSubstr("scored_requests_total{code=\"INVALID_ARGUMENT\",method=\"Score\"} 1"));
  EXPECT_THAT(text, HasSubstr("scored_request_latency_seconds_count{method=\"Score\"} 2"));
  EXPECT_THAT(text, HasSubstr("scored_tokens_scored_total 299"));
  EXPECT_THAT(text, HasSubstr("scored_batch_tokens_sum 300"));
  EXPECT_THAT(text, HasSubstr("scored_queue_depth 3"));
  EXPECT_THAT(
      text, HasSubstr("scored_model_info{architecture=\"LlamaForCausalLM\",backend=\"cpu\",dtype=\"fp32\","
                      "fingerprint=\"508d5a3d\",format=\"dense-f32\",model=\"stories260K-hf\",tp=\"1\"} 1"));
  EXPECT_THAT(text, HasSubstr("scored_tokens_input_total 300"));
  EXPECT_THAT(text, HasSubstr("scored_device_memory_bytes{device=\"0\",kind=\"used\"} 100"));
  EXPECT_THAT(text, HasSubstr("scored_device_memory_bytes{device=\"0\",kind=\"total\"} 1000"));
}

TEST(MetricsTest, BusyPortIsUnavailable) {
  auto first = Metrics::Create("127.0.0.1:0");
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_GT((*first)->port(), 0);
  auto second = Metrics::Create("127.0.0.1:" + std::to_string((*first)->port()));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

TEST(ServerOptionsTest, SecurityAndLimitFlags) {
  ServerOptions o = GoodOptions();
  o.max_message_bytes = 1023;
  ExpectBadOptions(o, "--max_message_bytes must be in [1024, 2147483647]");
  o = GoodOptions();
  o.tls_key_file = "k.pem";
  ExpectBadOptions(o, "--tls_cert and --tls_key must be given together");
  o = GoodOptions();
  o.tls_client_ca_file = "ca.pem";
  ExpectBadOptions(o, "--tls_client_ca needs --tls_cert");
  o = GoodOptions();
  o.listen = "0.0.0.0:50051";
  ExpectBadOptions(o, "--allow_insecure_remote");
  o.allow_insecure_remote = true;
  EXPECT_TRUE(ValidateServerOptions(o).ok());
  o.allow_insecure_remote = false;
  o.auth_token_file = "token";
  EXPECT_TRUE(ValidateServerOptions(o).ok()) << "a token is enough";
  o.auth_token_file = "";
  o.tls_cert_file = "c.pem";
  o.tls_key_file = "k.pem";
  EXPECT_TRUE(ValidateServerOptions(o).ok()) << "TLS is enough";
}

TEST(SecurityTest, LoopbackAddresses) {
  for (const char* a : {"127.0.0.1:1", "127.1.2.3:0", "localhost:5", "LOCALHOST:5", "[::1]:0"}) {
    EXPECT_TRUE(IsLoopbackListen(a)) << a;
  }
  for (const char* a : {"0.0.0.0:1", "[::]:1", "10.0.0.1:1", "example.com:1", "127.0.0:1", "127.0.0.1.5:1",
                        "127.0.0.256:1", "1127.0.0.1:1", "[::ffff:127.0.0.1]:1", "nohost"}) {
    EXPECT_FALSE(IsLoopbackListen(a)) << a;
  }
}

TEST(SecurityTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("abcdef", "abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("abcdef", "abcdeg"));
  EXPECT_FALSE(ConstantTimeEquals("abcdef", "abcde"));
  EXPECT_FALSE(ConstantTimeEquals("abcdef", "abcdefg"));
  EXPECT_FALSE(ConstantTimeEquals("abcdef", ""));
  EXPECT_FALSE(ConstantTimeEquals("abc", std::string("abc\0", 4)));
}

TEST(SecurityTest, BearerTokenChecks) {
  EXPECT_EQ(BearerTokenAuth::FromToken("short").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BearerTokenAuth::FromToken("has a space in it!").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto auth = BearerTokenAuth::FromToken("0123456789abcdef");
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE((*auth)->CheckHeader(true, "Bearer 0123456789abcdef").ok());
  EXPECT_TRUE((*auth)->CheckHeader(true, "BEARER 0123456789abcdef").ok());
  const absl::Status missing = (*auth)->CheckHeader(false, "");
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(missing.message()), HasSubstr("authorization: Bearer <token>"));
  EXPECT_EQ((*auth)->CheckHeader(true, "Basic 0123456789abcdef").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ((*auth)->CheckHeader(true, "Bearer 0123456789abcdeF").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ((*auth)->CheckHeader(true, "Bearer ").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE((*auth)->CheckHeader(true, "Bearer   0123456789abcdef").ok());  // 1*SP (RFC 6750)
  // Exact: nothing after the token (a NUL, junk, whitespace), no second scheme.
  for (const std::string& inexact :
       {std::string("Bearer 0123456789abcdef\0junk", 28), std::string("Bearer 0123456789abcdefjunk"),
        std::string("Bearer 0123456789abcdef "), std::string("Bearer 0123456789abcdef\t"),
        std::string("Bearer Bearer 0123456789abcdef"), std::string(" Bearer 0123456789abcdef")}) {
    EXPECT_EQ((*auth)->CheckHeader(true, inexact).code(), absl::StatusCode::kUnauthenticated) << inexact;
  }
  const absl::Status wrong = (*auth)->CheckHeader(true, "Bearer nope-nope-nope-nope");
  EXPECT_THAT(std::string(wrong.message()), ::testing::Not(HasSubstr("0123456789abcdef")))
      << "an error never echoes the secret";
}

TEST(FaultInjectionTest, Parses) {
  EXPECT_EQ(ParseFaultInjection("")->fatal_after_batches, -1);
  EXPECT_EQ(ParseFaultInjection("fatal_after:0")->fatal_after_batches, 0);
  EXPECT_EQ(ParseFaultInjection("fatal_after:7")->fatal_after_batches, 7);
  EXPECT_EQ(ParseFaultInjection("fatal_after:7")->fatal_after_ms, -1);
  EXPECT_EQ(ParseFaultInjection("fatal_after_ms:1500")->fatal_after_ms, 1500);
  EXPECT_EQ(ParseFaultInjection("slow_load_ms:20000")->slow_load_ms, 20000);
  EXPECT_EQ(ParseFaultInjection("slow_load_ms:1000000000")->slow_load_ms, 1000000000);
  EXPECT_THAT(std::string(ParseFaultInjection("fatal_after_ms:2000000000").status().message()),
              HasSubstr("with N, T in [0, 1000000000]"));
  EXPECT_EQ(ParseFaultInjection("slow_load_ms:20000")->fatal_after_ms, -1);
  EXPECT_FALSE(ParseFaultInjection("slow_load_ms:-1").ok());
  EXPECT_EQ(ParseFaultInjection("fatal_after_ms:1500")->fatal_after_batches, -1);
  EXPECT_EQ(ParseFaultInjection("device_trap_after:3")->device_trap_after_batches, 3);
  EXPECT_EQ(ParseFaultInjection("device_trap_after:3")->fatal_after_batches, -1);
  EXPECT_EQ(ParseFaultInjection("fatal_after:3")->device_trap_after_batches, -1);
  for (const char* bad : {"fatal_after:", "fatal_after:-1", "fatal_after:x", "crash", "fatal_after_ms:-5",
                          "fatal_after_ms:", "device_trap_after:", "device_trap_after:-2",
                          "slow_load_ms:1000000001", "fatal_after:99999999999"}) {
    EXPECT_EQ(ParseFaultInjection(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace scored

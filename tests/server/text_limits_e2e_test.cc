// Text limits end to end, on the real `scored` (CPU backend, stories260K-hf; README "Text limits"):
//   - a text over --max_text_bytes is OUT_OF_RANGE naming the flag, the size and the limit (Tokenize, Score,
//     ScoreStream), before any tokenization;
//   - a Score text far longer than max_seq_len stops being tokenized right past it (OUT_OF_RANGE saying so,
//     counted under scored_tokenizations_stopped_total{reason="max_seq_len"});
//   - while a big Tokenize occupies the only tokenize thread, a token-id Score is answered, a text request
//     beyond --tokenize_queue is RESOURCE_EXHAUSTED, and cancelling the Tokenize stops its tokenization
//     (the log and the metric say so) after which the queued text is served;
//   - SIGTERM during a long tokenization: the tokenization stops at the end of the grace and the process
//   exits.
// The order of events is established by waiting for the server's log lines, never by timing.
#include <signal.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "scored/v1/scorer.grpc.pb.h"
#include "tests/server/scored_process.h"

namespace scored {
namespace {

using ::scored::testing::HttpGet;
using ::scored::testing::MetricValue;
using ::scored::testing::ScoredProcess;
using ::scored::testing::ScoredProcessOptions;
using ::testing::HasSubstr;

// Big enough that tokenizing it takes seconds on any machine (millions of distinct words, so the per-call
// word cache does not help), yet well under the 64 MiB message limit.
constexpr size_t kBigTextBytes = 40'000'000;

// `bytes` of text made of pseudo-random lowercase words of 3..10 letters, separated by spaces.
std::string RandomWords(size_t bytes) {
  std::string text;
  text.reserve(bytes);
  uint64_t x = 0x9E3779B97F4A7C15u;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  while (text.size() < bytes) {
    const int len = 3 + static_cast<int>(next() % 8);
    for (int i = 0; i < len && text.size() < bytes; ++i) text.push_back(static_cast<char>('a' + next() % 26));
    if (text.size() < bytes) text.push_back(' ');
  }
  return text;
}

std::unique_ptr<ScoredProcess> StartOrDie(const std::vector<std::string>& extra) {
  ScoredProcessOptions o;
  o.args = {"--model=" + scored::testing::StoriesModelDir(), "--backend=cpu"};
  o.args.insert(o.args.end(), extra.begin(), extra.end());
  auto p = ScoredProcess::Start(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

std::unique_ptr<v1::Scorer::Stub> NewStub(const ScoredProcess& p) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return v1::Scorer::NewStub(
      grpc::CreateCustomChannel(p.grpc_address(), grpc::InsecureChannelCredentials(), args));
}

double Metric(const ScoredProcess& p, const std::string& sample) {
  auto text = HttpGet("127.0.0.1", p.metrics_port(), "/metrics");
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return -1;
  auto v = MetricValue(*text, sample);
  EXPECT_TRUE(v.ok()) << sample << ": " << v.status();
  return v.ok() ? *v : -1;
}

std::string Stopped(const std::string& reason) {
  return absl::StrCat("scored_tokenizations_stopped_total{reason=\"", reason, "\"}");
}

v1::ScoreRequest TextRequest(const std::string& text, uint64_t request_id = 0) {
  v1::ScoreRequest r;
  r.set_request_id(request_id);
  r.mutable_text()->set_text(text);
  return r;
}

// A Tokenize in flight, on a thread of its own (a blocking call; TryCancel ends it).
struct AsyncTokenize {
  grpc::ClientContext context;
  v1::TokenizeRequest request;
  v1::TokenizeResponse response;
  grpc::Status status;
  absl::Notification done;
  std::thread thread;

  ~AsyncTokenize() {
    if (thread.joinable()) thread.join();
  }
  void Start(v1::Scorer::Stub* stub, std::string text) {
    request.set_text(std::move(text));
    thread = std::thread([this, stub] {
      status = stub->Tokenize(&context, request, &response);
      done.Notify();
    });
  }
};

TEST(TextLimitsE2eTest, TextOverMaxTextBytesIsOutOfRangeNamingTheLimit) {
  auto proc = StartOrDie({"--max_text_bytes=1000"});
  ASSERT_NE(proc, nullptr);
  EXPECT_THAT(proc->ReadLog(), HasSubstr("text limits: --max_text_bytes 1000, --tokenize_threads 2"));
  auto stub = NewStub(*proc);
  const std::string at_limit = RandomWords(1000);
  const std::string over = RandomWords(1001);

  {
    grpc::ClientContext context;
    v1::TokenizeRequest request;
    request.set_text(at_limit);
    v1::TokenizeResponse response;
    const grpc::Status s = stub->Tokenize(&context, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_GT(response.ids_size(), 100);
  }
  {
    grpc::ClientContext context;
    v1::TokenizeRequest request;
    request.set_text(over);
    v1::TokenizeResponse response;
    const grpc::Status s = stub->Tokenize(&context, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE) << s.error_message();
    EXPECT_THAT(s.error_message(),
                HasSubstr("text of 1001 bytes is longer than --max_text_bytes (1000 bytes)"));
  }
  {
    grpc::ClientContext context;
    v1::ScoreResponse response;
    const grpc::Status s = stub->Score(&context, TextRequest(over), &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE) << s.error_message();
    EXPECT_THAT(s.error_message(),
                HasSubstr("text of 1001 bytes is longer than --max_text_bytes (1000 bytes)"));
  }
  {
    // In a stream: an error response for that request, and the stream goes on.
    grpc::ClientContext context;
    auto stream = stub->ScoreStream(&context);
    ASSERT_TRUE(stream->Write(TextRequest(over, 7)));
    ASSERT_TRUE(stream->Write(TextRequest("Once upon a time there was a cat.", 8)));
    stream->WritesDone();
    std::vector<v1::ScoreResponse> responses;
    v1::ScoreResponse r;
    while (stream->Read(&r)) responses.push_back(r);
    ASSERT_TRUE(stream->Finish().ok());
    ASSERT_EQ(responses.size(), 2u);
    for (const v1::ScoreResponse& response : responses) {
      if (response.request_id() == 7) {
        EXPECT_EQ(response.error().code(), static_cast<int>(grpc::StatusCode::OUT_OF_RANGE));
        EXPECT_THAT(response.error().message(), HasSubstr("--max_text_bytes (1000 bytes)"));
      } else {
        EXPECT_EQ(response.request_id(), 8u);
        EXPECT_FALSE(response.has_error()) << response.error().message();
        EXPECT_GT(response.num_scored(), 5);
      }
    }
  }
  // Refused before any tokenization: none was stopped part-way.
  EXPECT_EQ(Metric(*proc, Stopped("max_seq_len")), 0);
}

class OneTokenizeThreadTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    proc_ = StartOrDie({"--max_text_bytes=60000000", "--tokenize_threads=1", "--tokenize_queue=1",
                        "--max_seq_len=64", "--shutdown_grace_s=5"})
                .release();
  }
  static void TearDownTestSuite() {
    delete proc_;
    proc_ = nullptr;
  }
  static ScoredProcess* proc_;
};
ScoredProcess* OneTokenizeThreadTest::proc_ = nullptr;

TEST_F(OneTokenizeThreadTest, ScoreTextFarOverMaxSeqLenStopsAtTheLimit) {
  ASSERT_NE(proc_, nullptr);
  auto stub = NewStub(*proc_);
  const double before = Metric(*proc_, Stopped("max_seq_len"));
  // Over a hundred thousand tokens for a 64-token limit.
  grpc::ClientContext context;
  v1::ScoreResponse response;
  const grpc::Status s = stub->Score(&context, TextRequest(RandomWords(512 << 10)), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE) << s.error_message();
  EXPECT_THAT(
      s.error_message(),
      HasSubstr("sequence has more than 64 tokens; max_seq_len is 64 (the text was tokenized no further)"));
  EXPECT_EQ(Metric(*proc_, Stopped("max_seq_len")), before + 1);

  // One 1 MiB word (no spaces): refused by its length alone, before its merges.
  grpc::ClientContext word_context;
  const grpc::Status word = stub->Score(&word_context, TextRequest(std::string(1 << 20, 'a')), &response);
  EXPECT_EQ(word.error_code(), grpc::StatusCode::OUT_OF_RANGE) << word.error_message();
  EXPECT_THAT(word.error_message(), HasSubstr("sequence has more than 64 tokens"));
  EXPECT_EQ(Metric(*proc_, Stopped("max_seq_len")), before + 2);

  // A text within the limit is scored, its ids echoed (BOS first).
  grpc::ClientContext ok_context;
  const grpc::Status ok =
      stub->Score(&ok_context, TextRequest("Once upon a time there was a cat."), &response);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  ASSERT_GT(response.tokens_size(), 5);
  EXPECT_EQ(response.tokens(0), 1);
  EXPECT_EQ(response.num_scored(), response.tokens_size() - 1);
}

TEST_F(OneTokenizeThreadTest, BigTokenizeNeitherDelaysScoringNorSurvivesItsCancellation) {
  ASSERT_NE(proc_, nullptr);
  auto stub = NewStub(*proc_);
  const double cancelled_before = Metric(*proc_, Stopped("cancelled"));

  AsyncTokenize big;
  big.Start(stub.get(), RandomWords(kBigTextBytes));
  // The only tokenize thread is now busy with it.
  ASSERT_TRUE(proc_
                  ->WaitForLog(absl::StrCat("Tokenize: tokenizing ", kBigTextBytes, " bytes of text"),
                               absl::Seconds(120))
                  .ok());

  // 1. A token-id Score does not wait for it.
  {
    grpc::ClientContext context;
    v1::ScoreRequest request;
    for (int32_t id : {1, 100, 200}) request.mutable_tokens()->add_ids(id);
    v1::ScoreResponse response;
    const grpc::Status s = stub->Score(&context, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(response.num_scored(), 2);
  }
  EXPECT_FALSE(big.done.HasBeenNotified()) << "the big Tokenize ended early: " << big.status.error_message();

  // 2. Texts wait for the busy thread: one fits the queue (--tokenize_queue=1), the next is refused. A stream
  //    reads in order, so text 1 is queued before text 2 is read.
  grpc::ClientContext stream_context;
  auto stream = stub->ScoreStream(&stream_context);
  ASSERT_TRUE(stream->Write(TextRequest("Once upon a time there was a cat.", 1)));
  ASSERT_TRUE(stream->Write(TextRequest("The cat sat on the mat.", 2)));
  v1::ScoreResponse refused;
  ASSERT_TRUE(stream->Read(&refused));
  EXPECT_EQ(refused.request_id(), 2u);
  EXPECT_EQ(refused.error().code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_THAT(refused.error().message(), HasSubstr("--tokenize_queue"));

  // 3. Cancelling the big Tokenize stops its tokenization part-way.
  EXPECT_FALSE(big.done.HasBeenNotified()) << "the big Tokenize ended early: " << big.status.error_message();
  big.context.TryCancel();
  big.done.WaitForNotification();
  EXPECT_EQ(big.status.error_code(), grpc::StatusCode::CANCELLED) << big.status.error_message();
  ASSERT_TRUE(proc_
                  ->WaitForLog(
                      absl::StrCat("Tokenize: tokenization of ", kBigTextBytes, " bytes stopped (cancelled)"),
                      absl::Seconds(60))
                  .ok());
  EXPECT_EQ(Metric(*proc_, Stopped("cancelled")), cancelled_before + 1);

  // 4. The thread is free again: the queued text is scored.
  v1::ScoreResponse served;
  ASSERT_TRUE(stream->Read(&served));
  EXPECT_EQ(served.request_id(), 1u);
  EXPECT_FALSE(served.has_error()) << served.error().message();
  EXPECT_GT(served.num_scored(), 5);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

// A text whose deadline passes while it waits for the busy tokenize thread is stopped at its first check:
// DEADLINE_EXCEEDED for the client, reason "deadline" on the server.
TEST_F(OneTokenizeThreadTest, DeadlinePassedWhileQueuedStopsTheTokenization) {
  ASSERT_NE(proc_, nullptr);
  auto stub = NewStub(*proc_);
  const double deadline_before = Metric(*proc_, Stopped("deadline"));
  // Half as long again as kBigTextBytes (seconds more of work than the deadline below), and a log line of its
  // own in this server's log.
  const size_t big_bytes = 60'000'000;
  AsyncTokenize big;
  big.Start(stub.get(), RandomWords(big_bytes));
  ASSERT_TRUE(
      proc_
          ->WaitForLog(absl::StrCat("Tokenize: tokenizing ", big_bytes, " bytes of text"), absl::Seconds(120))
          .ok());

  // Logged (>= 1 MiB), and small enough to arrive well within its deadline.
  const size_t late_bytes = (1 << 20) + 1;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(500)));
  v1::TokenizeRequest request;
  request.set_text(RandomWords(late_bytes));
  v1::TokenizeResponse response;
  const grpc::Status late = stub->Tokenize(&context, request, &response);
  EXPECT_EQ(late.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << late.error_message();

  EXPECT_FALSE(big.done.HasBeenNotified()) << "the big Tokenize ended early: " << big.status.error_message();
  big.context.TryCancel();
  big.done.WaitForNotification();
  ASSERT_TRUE(
      proc_
          ->WaitForLog(absl::StrCat("Tokenize: tokenization of ", late_bytes, " bytes stopped (deadline)"),
                       absl::Seconds(60))
          .ok());
  EXPECT_EQ(Metric(*proc_, Stopped("deadline")), deadline_before + 1);
}

TEST(TextLimitsShutdownE2eTest, SigtermDuringALongTokenizationExitsAfterTheGrace) {
  auto proc = StartOrDie({"--max_text_bytes=60000000", "--shutdown_grace_s=1"});
  ASSERT_NE(proc, nullptr);
  auto stub = NewStub(*proc);
  AsyncTokenize big;
  big.Start(stub.get(), RandomWords(kBigTextBytes));
  ASSERT_TRUE(proc->WaitForLog(absl::StrCat("Tokenize: tokenizing ", kBigTextBytes, " bytes of text"),
                               absl::Seconds(120))
                  .ok());
  ASSERT_TRUE(proc->SendSignal(SIGTERM).ok());
  // Generous: the grace is 1 s; without the stop the whole tokenization would have to finish first.
  absl::StatusOr<int> code = proc->Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status() << "\n" << proc->ReadLog();
  EXPECT_EQ(*code, 0) << proc->ReadLog();
  big.done.WaitForNotification();
  EXPECT_FALSE(big.status.ok()) << "the tokenization ran to its end";
  EXPECT_THAT(proc->ReadLog(), HasSubstr(absl::StrCat("Tokenize: tokenization of ", kBigTextBytes,
                                                      " bytes stopped (shutdown)")));
}

}  // namespace
}  // namespace scored

// End to end: the server-wide limits of the real `scored` (CPU backend, stories260K-hf) on 127.0.0.1:0.
//   - --max_buffered_bytes: 100 ScoreStreams (on 10 connections) send long top-k requests and never read;
//     the streams get back-pressure (they stop being read) or RESOURCE_EXHAUSTED, the bytes the server
//     reports on /metrics stay within the budget, another client's Score is still answered, and once the
//     streams read, every request they sent has exactly one response (scored, or RESOURCE_EXHAUSTED naming
//     the flag) and the budget returns to 0. SIGTERM while streams are held exits 0. A Tokenize whose output
//     could pass the budget is refused before any work.
//   - --max_connections: a call on a second connection is refused while the first has a call in progress.
//   - --max_streams_per_connection: a second call on a connection waits while the first holds its only
//     stream.
// Behaviour only: conditions are waited for on the server's metrics, never for a fixed time (the
// streams-per-connection test ends a waiting call with a 2 s deadline and checks it never reached the
// server).
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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

constexpr int64_t kBudget = 4 << 20;  // 4 MiB: about 14 reservations of the requests below
constexpr int kStreams = 100;
constexpr int kConnections = 10;
constexpr int kRequestsPerStream = 4;
constexpr int kTokens = 256;  // stories260K's context is 512
constexpr int kTopK = 64;

std::unique_ptr<ScoredProcess> StartOrDie(const std::vector<std::string>& extra) {
  ScoredProcessOptions o;
  o.args = {"--model=" + scored::testing::StoriesModelDir(), "--backend=cpu"};
  o.args.insert(o.args.end(), extra.begin(), extra.end());
  auto p = ScoredProcess::Start(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

// A channel with its own connection (gRPC shares one between channels of equal arguments otherwise).
// `hold_window`: the client library keeps its streams' receive windows at HTTP/2's initial 64 KiB instead of
// growing them (BDP probing), so a response the application does not read stays in the server, as it does
// for any client once its windows are full; one response here is ~165 KB.
std::shared_ptr<grpc::Channel> NewConnection(const std::string& address, bool hold_window = false) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (hold_window) args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

v1::ScoreRequest LongTopKRequest(uint64_t request_id) {
  v1::ScoreRequest r;
  r.set_request_id(request_id);
  for (int i = 0; i < kTokens; ++i) {
    r.mutable_tokens()->add_ids(
        static_cast<int32_t>(3 + (request_id * 31 + static_cast<uint64_t>(i) * 7) % 509));
  }
  r.set_top_k(kTopK);
  return r;
}

v1::ScoreRequest ShortRequest(uint64_t request_id) {
  v1::ScoreRequest r;
  r.set_request_id(request_id);
  for (int32_t id : {1, 100, 200, 300, 50, 7}) r.mutable_tokens()->add_ids(id);
  return r;
}

// Scrapes /metrics until `done(exposition)` holds or `timeout` passes (there is no blocking wait on a
// metric). Every scrape also checks that the buffered bytes stay within --max_buffered_bytes.
class MetricsWatch {
 public:
  explicit MetricsWatch(const ScoredProcess* proc) : proc_(proc) {}

  double Value(const std::string& text, const std::string& sample) const {
    absl::StatusOr<double> v = MetricValue(text, sample);
    return v.ok() ? *v : 0.0;
  }

  template <typename Done>
  bool WaitFor(Done done, absl::Duration timeout = absl::Seconds(120)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      absl::StatusOr<std::string> text = HttpGet("127.0.0.1", proc_->metrics_port(), "/metrics");
      EXPECT_TRUE(text.ok()) << text.status();
      if (text.ok()) {
        const double buffered = Value(*text, "scored_buffered_bytes");
        max_buffered_ = std::max(max_buffered_, buffered);
        EXPECT_LE(buffered, static_cast<double>(kBudget));
        last_ = *text;
        if (done(*text)) return true;
      }
      if (absl::Now() > deadline) return false;
      // The interval between two scrapes, not a wait for anything: the outcome is decided by `done` on a
      // scrape, whenever it holds (a loaded machine only takes more scrapes), or by the 120 s deadline.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  double max_buffered() const { return max_buffered_; }
  const std::string& last() const { return last_; }

 private:
  const ScoredProcess* const proc_;
  double max_buffered_ = 0;
  std::string last_;
};

struct OpenStream {
  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ScoreRequest, v1::ScoreResponse>> rw;
};

// Request k of stream s: id s * 10 + k.
uint64_t RequestId(int s, int k) { return static_cast<uint64_t>(s * 10 + k); }

// `count` ScoreStreams, stream s on stubs[s % stubs.size()], each sending request(s, k) for k in
// [0, kRequestsPerStream) and reading nothing (yet). False when a write fails.
bool OpenStreams(const std::vector<std::unique_ptr<v1::Scorer::Stub>>& stubs, int count,
                 const std::function<v1::ScoreRequest(int s, int k)>& request,
                 std::vector<OpenStream>* streams) {
  streams->resize(count);
  for (int s = 0; s < count; ++s) {
    OpenStream& stream = (*streams)[s];
    stream.context = std::make_unique<grpc::ClientContext>();
    stream.rw = stubs[s % stubs.size()]->ScoreStream(stream.context.get());
    for (int k = 0; k < kRequestsPerStream; ++k) {
      if (!stream.rw->Write(request(s, k))) return false;
    }
  }
  return true;
}

// Ends stream s's writes, reads every response (each passed to `each`) and finishes it: the stream ends OK
// and each request it sent has exactly one response.
void DrainStream(OpenStream& stream, int s, const std::function<void(const v1::ScoreResponse&)>& each) {
  ASSERT_TRUE(stream.rw->WritesDone());
  std::set<uint64_t> ids;
  v1::ScoreResponse response;
  while (stream.rw->Read(&response)) {
    EXPECT_TRUE(ids.insert(response.request_id()).second) << "two responses for " << response.request_id();
    each(response);
  }
  const grpc::Status status = stream.rw->Finish();
  EXPECT_TRUE(status.ok()) << "stream " << s << ": " << status.error_message();
  std::set<uint64_t> want;
  for (int k = 0; k < kRequestsPerStream; ++k) want.insert(RequestId(s, k));
  EXPECT_EQ(ids, want) << "stream " << s;
}

TEST(MemoryBudgetE2eTest, NonReadingStreamsAreHeldWithinTheBudgetAndOthersAreServed) {
  auto proc = StartOrDie({"--max_buffered_bytes=" + std::to_string(kBudget)});
  ASSERT_NE(proc, nullptr);
  EXPECT_THAT(proc->ReadLog(), HasSubstr("limits: max_buffered_bytes 4194304 (--max_buffered_bytes"));
  MetricsWatch watch(proc.get());
  ASSERT_TRUE(watch.WaitFor([&](const std::string& m) {
    return watch.Value(m, "scored_buffered_bytes_limit") == static_cast<double>(kBudget);
  }));

  // 100 streams on 10 connections, each sends its requests and reads nothing.
  std::vector<std::unique_ptr<v1::Scorer::Stub>> stubs;
  for (int c = 0; c < kConnections; ++c) {
    stubs.push_back(v1::Scorer::NewStub(NewConnection(proc->grpc_address(), /*hold_window=*/true)));
  }
  std::vector<OpenStream> streams;
  ASSERT_TRUE(OpenStreams(
      stubs, kStreams, [](int s, int k) { return LongTopKRequest(RequestId(s, k)); }, &streams));

  // The budget fills (about 14 reservations): a stream whose own response holds part of it parks the next
  // request it reads and stops reading; a stream with nothing of its own outstanding gets RESOURCE_EXHAUSTED.
  const bool held = watch.WaitFor([&](const std::string& m) {
    return watch.Value(m, "scored_streams_paused") >= 5 &&
           watch.Value(
               m, "scored_limit_rejections_total{limit=\"max_buffered_bytes\",method=\"ScoreStream\"}") >= 1;
  });
  ASSERT_TRUE(held) << "the streams were not held back; last scrape:\n" << watch.last();
  // Generous margins: at least a quarter of the streams' share is in use (14 reservations fit).
  EXPECT_GE(watch.Value(watch.last(), "scored_buffered_bytes"), static_cast<double>(kBudget) / 4);

  // Another client is still answered, with the same long top-k request (the budget keeps a quarter for
  // unary calls) and a short one.
  auto other = v1::Scorer::NewStub(NewConnection(proc->grpc_address()));
  for (const v1::ScoreRequest& request : {LongTopKRequest(9001), ShortRequest(9002)}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    v1::ScoreResponse response;
    const grpc::Status status = other->Score(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
    EXPECT_EQ(response.request_id(), request.request_id());
    EXPECT_EQ(response.num_scored(), request.tokens().ids_size() - 1);
    EXPECT_EQ(response.top_k_size(), request.top_k() > 0 ? request.tokens().ids_size() - 1 : 0);
  }
  ASSERT_TRUE(watch.WaitFor([](const std::string&) { return true; }));
  EXPECT_GE(watch.Value(watch.last(), "scored_streams_paused"), 5) << "the streams stay held";

  // Now every stream reads: each request it sent has exactly one response, scored or RESOURCE_EXHAUSTED.
  int scored = 0;
  int refused = 0;
  for (int s = 0; s < kStreams; ++s) {
    DrainStream(streams[s], s, [&](const v1::ScoreResponse& response) {
      if (response.has_error()) {
        EXPECT_EQ(response.error().code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
        EXPECT_THAT(response.error().message(), HasSubstr("--max_buffered_bytes=4194304"));
        ++refused;
      } else {
        ASSERT_EQ(response.top_k_size(), kTokens - 1);
        EXPECT_EQ(response.top_k(0).tokens_size(), kTopK);
        ++scored;
      }
    });
  }
  std::printf("%d requests scored, %d refused (RESOURCE_EXHAUSTED); at most %.0f bytes buffered of %lld\n",
              scored, refused, watch.max_buffered(), static_cast<long long>(kBudget));
  EXPECT_EQ(scored + refused, kStreams * kRequestsPerStream);
  EXPECT_GE(scored, 10);
  EXPECT_GE(refused, 1);

  // Every charge is released once the streams are done, and nothing stays paused or connected.
  EXPECT_TRUE(watch.WaitFor([&](const std::string& m) {
    return watch.Value(m, "scored_buffered_bytes") == 0 && watch.Value(m, "scored_streams_paused") == 0 &&
           watch.Value(m, "scored_connections") == 0;
  })) << watch.last();
  EXPECT_GT(watch.max_buffered(), 0);
  EXPECT_LE(watch.max_buffered(), static_cast<double>(kBudget));
}

// Text requests on held streams: a text is tokenized on the tokenize pool while the stream goes on reading,
// so a tokenization can finish while another request is parked; the parked requests form a line. Every
// request still gets exactly one response (scored, with its ids echoed, or RESOURCE_EXHAUSTED naming the
// flag).
TEST(MemoryBudgetE2eTest, TextRequestsOnHeldStreamsEachGetOneResponse) {
  auto proc = StartOrDie({"--max_buffered_bytes=" + std::to_string(kBudget)});
  ASSERT_NE(proc, nullptr);
  MetricsWatch watch(proc.get());
  constexpr int kTextStreams = 24;
  std::string text;
  while (text.size() < 480)
    text += "Once upon a time, a little girl named Lily found a shiny red ball in the park. ";
  std::vector<std::unique_ptr<v1::Scorer::Stub>> stubs;
  stubs.push_back(v1::Scorer::NewStub(NewConnection(proc->grpc_address(), /*hold_window=*/true)));
  std::vector<OpenStream> streams;
  ASSERT_TRUE(OpenStreams(
      stubs, kTextStreams,
      [&](int s, int k) {
        v1::ScoreRequest request = LongTopKRequest(RequestId(s, k));
        if (k % 2 == 1) request.mutable_text()->set_text(text);  // every other request as text
        return request;
      },
      &streams));
  ASSERT_TRUE(watch.WaitFor([&](const std::string& m) {
    return watch.Value(m, "scored_streams_paused") >= 3;
  })) << "the streams were not held back; last scrape:\n"
      << watch.last();
  int scored_text = 0;
  for (int s = 0; s < kTextStreams; ++s) {
    DrainStream(streams[s], s, [&](const v1::ScoreResponse& response) {
      if (response.has_error()) {
        EXPECT_EQ(response.error().code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED))
            << response.error().message();
      } else if (response.request_id() % 2 == 1) {
        EXPECT_GT(response.tokens_size(), 80);  // a text request: its ids are echoed
        ++scored_text;
      }
    });
  }
  EXPECT_GE(scored_text, 1);
  EXPECT_TRUE(watch.WaitFor([&](const std::string& m) {
    return watch.Value(m, "scored_buffered_bytes") == 0 && watch.Value(m, "scored_streams_paused") == 0;
  })) << watch.last();
}

// SIGTERM while streams are held for the budget: each parked request is answered UNAVAILABLE, the streams end
// (their clients never read, so the grace period cancels them) and the server exits 0. The grace must cover
// the requests already queued when the drain begins (~14 long top-k requests: under 1 s in a release build,
// ~5 s under ASan on 2 cores), or the server rightly exits 1 for cutting them off; the streams that never
// read hold the shutdown for the whole grace either way.
TEST(MemoryBudgetE2eTest, ShutdownWithPausedStreamsExitsCleanly) {
  auto proc = StartOrDie({"--max_buffered_bytes=" + std::to_string(kBudget), "--shutdown_grace_s=12"});
  ASSERT_NE(proc, nullptr);
  MetricsWatch watch(proc.get());
  std::vector<std::unique_ptr<v1::Scorer::Stub>> stubs;
  stubs.push_back(v1::Scorer::NewStub(NewConnection(proc->grpc_address(), /*hold_window=*/true)));
  std::vector<OpenStream> streams;
  ASSERT_TRUE(OpenStreams(
      stubs, 20, [](int s, int k) { return LongTopKRequest(RequestId(s, k)); }, &streams));
  ASSERT_TRUE(watch.WaitFor([&](const std::string& m) {
    return watch.Value(m, "scored_streams_paused") >= 5;
  })) << watch.last();
  ASSERT_TRUE(proc->SendSignal(SIGTERM).ok());
  absl::StatusOr<int> code = proc->Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << proc->ReadLog();
  for (OpenStream& stream : streams) {
    stream.context->TryCancel();
    stream.rw->Finish().IgnoreError();
  }
}

TEST(MemoryBudgetE2eTest, UnaryWorkBeyondTheBudgetIsResourceExhausted) {
  auto proc = StartOrDie({"--max_buffered_bytes=1048576"});
  ASSERT_NE(proc, nullptr);
  MetricsWatch watch(proc.get());
  auto stub = v1::Scorer::NewStub(NewConnection(proc->grpc_address()));
  // The largest Score this model takes (top_k 64 over 512 tokens, ~440 KB reserved) fits in 1 MiB.
  v1::ScoreRequest largest;
  for (int i = 0; i < 512; ++i) largest.mutable_tokens()->add_ids(5 + i % 400);
  largest.set_top_k(kTopK);
  grpc::ClientContext c1;
  v1::ScoreResponse r1;
  const grpc::Status s1 = stub->Score(&c1, largest, &r1);
  ASSERT_TRUE(s1.ok()) << s1.error_message();
  EXPECT_EQ(r1.top_k_size(), 511);

  // A Tokenize of 200 KB of text may produce up to one id per byte: ~2 MB reserved, refused before any
  // work, naming the flag and the numbers.
  v1::TokenizeRequest big;
  while (big.text().size() < 200000) big.mutable_text()->append("Once upon a time there was a cat. ");
  grpc::ClientContext c2;
  v1::TokenizeResponse r2;
  const grpc::Status s2 = stub->Tokenize(&c2, big, &r2);
  EXPECT_EQ(s2.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s2.error_message(), HasSubstr("of --max_buffered_bytes=1048576 are in use"));
  // A small one still goes through, and the budget is back to 0 after both.
  v1::TokenizeRequest small;
  small.set_text("Once upon a time");
  grpc::ClientContext c3;
  v1::TokenizeResponse r3;
  const grpc::Status s3 = stub->Tokenize(&c3, small, &r3);
  EXPECT_TRUE(s3.ok()) << s3.error_message();
  EXPECT_GT(r3.ids_size(), 2);
  ASSERT_TRUE(watch.WaitFor([&](const std::string& m) {
    return watch.Value(
               m, "scored_limit_rejections_total{limit=\"max_buffered_bytes\",method=\"Tokenize\"}") == 1 &&
           watch.Value(m, "scored_buffered_bytes") == 0;
  })) << watch.last();
}

TEST(ConnectionCapE2eTest, ASecondConnectionIsRefusedWhileTheFirstHasACall) {
  auto proc = StartOrDie({"--max_connections=1"});
  ASSERT_NE(proc, nullptr);
  MetricsWatch watch(proc.get());
  auto first = v1::Scorer::NewStub(NewConnection(proc->grpc_address()));
  auto second = v1::Scorer::NewStub(NewConnection(proc->grpc_address()));

  // The first connection holds a stream (answered once, so the server has taken its slot).
  grpc::ClientContext stream_context;
  auto stream = first->ScoreStream(&stream_context);
  ASSERT_TRUE(stream->Write(ShortRequest(1)));
  v1::ScoreResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_FALSE(response.has_error()) << response.error().message();

  {
    grpc::ClientContext context;
    const grpc::Status refused = second->Score(&context, ShortRequest(2), &response);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(refused.error_message(), HasSubstr("--max_connections=1"));
  }
  {
    grpc::ClientContext context;  // the same connection is not capped
    const grpc::Status same = first->Score(&context, ShortRequest(3), &response);
    EXPECT_TRUE(same.ok()) << same.error_message();
  }
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_FALSE(stream->Read(&response));
  ASSERT_TRUE(stream->Finish().ok());
  ASSERT_TRUE(watch.WaitFor([&](const std::string& m) { return watch.Value(m, "scored_connections") == 0; }))
      << watch.last();
  {
    grpc::ClientContext context;
    const grpc::Status now = second->Score(&context, ShortRequest(4), &response);
    EXPECT_TRUE(now.ok()) << now.error_message();
  }
  EXPECT_EQ(
      watch.Value(watch.last(), "scored_limit_rejections_total{limit=\"max_connections\",method=\"Score\"}"),
      1);
}

TEST(ConnectionCapE2eTest, StreamsPerConnectionAreCapped) {
  auto proc = StartOrDie({"--max_streams_per_connection=1"});
  ASSERT_NE(proc, nullptr);
  MetricsWatch watch(proc.get());
  auto stub = v1::Scorer::NewStub(NewConnection(proc->grpc_address()));
  grpc::ClientContext stream_context;
  auto stream = stub->ScoreStream(&stream_context);
  ASSERT_TRUE(stream->Write(ShortRequest(1)));
  v1::ScoreResponse response;
  ASSERT_TRUE(stream->Read(&response));

  // The connection's only stream is taken: a second call waits in the client and never reaches the server
  // (its deadline is only there to end the wait; the server's request count shows it never arrived).
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    const grpc::Status waited = stub->Score(&context, ShortRequest(2), &response);
    EXPECT_EQ(waited.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << waited.error_message();
  }
  ASSERT_TRUE(watch.WaitFor([](const std::string&) { return true; }));
  EXPECT_EQ(watch.Value(watch.last(), "scored_requests_total{code=\"DEADLINE_EXCEEDED\",method=\"Score\"}"),
            0);
  EXPECT_EQ(watch.Value(watch.last(), "scored_requests_total{code=\"OK\",method=\"Score\"}"), 0);

  ASSERT_TRUE(stream->WritesDone());
  EXPECT_FALSE(stream->Read(&response));
  ASSERT_TRUE(stream->Finish().ok());
  grpc::ClientContext context;
  const grpc::Status served = stub->Score(&context, ShortRequest(3), &response);
  EXPECT_TRUE(served.ok()) << served.error_message();
}

TEST(ConnectionCapE2eTest, FlagsOutOfRangeAreRefusedAtStart) {
  for (const std::string& flag :
       {std::string("--max_streams_per_connection=0"), std::string("--max_connections=100000"),
        std::string("--max_buffered_bytes=1000")}) {
    ScoredProcessOptions o;
    o.args = {"--model=" + scored::testing::StoriesModelDir(), "--backend=cpu", flag};
    auto p = ScoredProcess::Start(o);
    ASSERT_FALSE(p.ok()) << flag;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(flag.substr(0, flag.find('=')) + " must be in"))
        << flag;
  }
}

}  // namespace
}  // namespace scored

// End to end: requests whose bytes are not the method's request message, sent by hand (a generic gRPC
// client; the generated stub cannot send them) to the real `scored` (CPU backend, stories260K-hf).
// ScoreStream answers such a message with an error response (INVALID_ARGUMENT naming the problem, the
// request_id when field 1 could be read) and goes on; unary Score and Tokenize answer INVALID_ARGUMENT
// with a message naming the problem. Well-formed bytes on the same path still score and tokenize.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "scored/v1/scorer.grpc.pb.h"
#include "tests/server/scored_process.h"

namespace scored {
namespace {

using ::scored::testing::ScoredProcess;
using ::scored::testing::ScoredProcessOptions;
using ::testing::HasSubstr;

constexpr int kInvalidArgument = static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT);
const std::vector<int32_t> kIds = {1, 100, 200, 300, 50, 7};

// A well-formed ScoreRequest for kIds.
std::string OkRequest(uint64_t request_id) {
  v1::ScoreRequest r;
  r.set_request_id(request_id);
  for (int32_t id : kIds) r.mutable_tokens()->add_ids(id);
  return r.SerializeAsString();
}

// ScoreRequest{request_id, text: TextInput{text: "ab\xff\xfe"}} encoded by hand: 0xff, 0xfe are no UTF-8.
std::string InvalidUtf8TextRequest(uint64_t request_id) {
  const std::string text_input(
      "\x0a\x04"
      "ab\xff\xfe",
      6);                                        // TextInput field 1 (string), 4 bytes
  std::string out("\x08", 1);                    // field 1 (varint)
  out.push_back(static_cast<char>(request_id));  // request_id < 128: one byte
  out += std::string("\x1a", 1) + static_cast<char>(text_input.size()) + text_input;  // field 3 (TextInput)
  return out;
}

// A well-formed request cut short inside its token ids: request_id (field 1) is still readable.
std::string TruncatedRequest(uint64_t request_id) {
  const std::string ok = OkRequest(request_id);
  return ok.substr(0, ok.size() - 3);
}

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string FromBuffer(const grpc::ByteBuffer& buffer) {
  grpc::Slice single;
  EXPECT_TRUE(buffer.DumpToSingleSlice(&single).ok());
  return std::string(reinterpret_cast<const char*>(single.begin()), single.size());
}

struct StreamResult {
  grpc::Status status;
  std::vector<v1::ScoreResponse> responses;  // sorted by request_id
};

class MalformedRequestE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ScoredProcessOptions o;
    o.args = {"--model=" + scored::testing::StoriesModelDir(), "--backend=cpu"};
    auto p = ScoredProcess::Start(o);
    ASSERT_TRUE(p.ok()) << p.status();
    proc_ = p->release();
  }
  static void TearDownTestSuite() {
    delete proc_;
    proc_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(proc_, nullptr);
    channel_ = grpc::CreateChannel(proc_->grpc_address(), grpc::InsecureChannelCredentials());
  }

  // One unary call of `method` ("/scored.v1.Scorer/Score") with `request` as its bytes.
  grpc::Status Unary(const std::string& method, const std::string& request, std::string* response) {
    grpc::GenericStub generic(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    grpc::CompletionQueue cq;
    const grpc::ByteBuffer out = ToBuffer(request);
    auto call = generic.PrepareUnaryCall(&ctx, method, out, &cq);
    call->StartCall();
    grpc::ByteBuffer in;
    grpc::Status status;
    call->Finish(&in, &status, reinterpret_cast<void*>(1));
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_TRUE(ok);
    if (status.ok()) *response = FromBuffer(in);
    return status;
  }

  // One ScoreStream: writes every message of `requests` as given, half-closes, reads every response.
  StreamResult Stream(const std::vector<std::string>& requests) {
    grpc::GenericStub generic(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    grpc::CompletionQueue cq;
    void* tag = nullptr;
    bool ok = false;
    auto call = generic.PrepareCall(&ctx, "/scored.v1.Scorer/ScoreStream", &cq);
    call->StartCall(reinterpret_cast<void*>(1));
    EXPECT_TRUE(cq.Next(&tag, &ok) && ok);
    for (const std::string& r : requests) {
      call->Write(ToBuffer(r), reinterpret_cast<void*>(2));
      EXPECT_TRUE(cq.Next(&tag, &ok) && ok);
    }
    call->WritesDone(reinterpret_cast<void*>(3));
    EXPECT_TRUE(cq.Next(&tag, &ok) && ok);
    StreamResult result;
    while (true) {
      grpc::ByteBuffer in;
      call->Read(&in, reinterpret_cast<void*>(4));
      if (!cq.Next(&tag, &ok) || !ok) break;
      v1::ScoreResponse response;
      EXPECT_TRUE(response.ParseFromString(FromBuffer(in)));
      result.responses.push_back(std::move(response));
    }
    call->Finish(&result.status, reinterpret_cast<void*>(5));
    EXPECT_TRUE(cq.Next(&tag, &ok));
    std::sort(result.responses.begin(), result.responses.end(),
              [](const v1::ScoreResponse& a, const v1::ScoreResponse& b) {
                return a.request_id() < b.request_id();
              });
    return result;
  }

  // The scored answer to kIds through the generated stub, to compare the raw path's answers with.
  v1::ScoreResponse Reference() {
    auto stub = v1::Scorer::NewStub(channel_);
    v1::ScoreRequest req;
    EXPECT_TRUE(req.ParseFromString(OkRequest(0)));
    grpc::ClientContext ctx;
    v1::ScoreResponse resp;
    EXPECT_TRUE(stub->Score(&ctx, req, &resp).ok());
    return resp;
  }

  static void ExpectScored(const v1::ScoreResponse& r, const v1::ScoreResponse& reference) {
    EXPECT_FALSE(r.has_error()) << r.error().message();
    EXPECT_EQ(r.num_scored(), static_cast<int32_t>(kIds.size()) - 1);
    ASSERT_EQ(r.logprob_size(), reference.logprob_size());
    for (int i = 0; i < r.logprob_size(); ++i) EXPECT_EQ(r.logprob(i), reference.logprob(i)) << i;
    EXPECT_LT(r.sum_logprob(), 0.0);
  }

  static ScoredProcess* proc_;
  std::shared_ptr<grpc::Channel> channel_;
};

ScoredProcess* MalformedRequestE2eTest::proc_ = nullptr;

TEST_F(MalformedRequestE2eTest, StreamAnswersInvalidUtf8WithAnErrorAndGoesOn) {
  const v1::ScoreResponse reference = Reference();
  const StreamResult got =
      Stream({OkRequest(1), OkRequest(2), InvalidUtf8TextRequest(3), OkRequest(4), OkRequest(5)});
  EXPECT_TRUE(got.status.ok()) << got.status.error_message();
  ASSERT_EQ(got.responses.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(got.responses[i].request_id(), static_cast<uint64_t>(i + 1));
  const v1::ScoreResponse& bad = got.responses[2];
  ASSERT_TRUE(bad.has_error());
  EXPECT_EQ(bad.error().code(), kInvalidArgument);
  EXPECT_THAT(bad.error().message(), HasSubstr("not a valid ScoreRequest"));
  EXPECT_THAT(bad.error().message(), HasSubstr("invalid UTF-8 in field text.text"));
  EXPECT_EQ(bad.logprob_size(), 0);
  for (int i : {0, 1, 3, 4}) ExpectScored(got.responses[i], reference);
  // The answer is the error response: protobuf's own "invalid UTF-8" log line (one per such request, which a
  // client could repeat at will) is not in the server's log.
  EXPECT_THAT(proc_->ReadLog(), ::testing::Not(HasSubstr("contains invalid UTF-8 data")));
}

TEST_F(MalformedRequestE2eTest, StreamAnswersTruncatedMessagesWithErrorsAndGoesOn) {
  const v1::ScoreResponse reference = Reference();
  // 7: cut inside its tokens, request_id readable. The lone 0x08 (field 1, varint, no value) has none: 0.
  const StreamResult got = Stream({OkRequest(1), TruncatedRequest(7), std::string("\x08", 1), OkRequest(9)});
  EXPECT_TRUE(got.status.ok()) << got.status.error_message();
  ASSERT_EQ(got.responses.size(), 4u);
  const v1::ScoreResponse& no_id = got.responses[0];
  EXPECT_EQ(no_id.request_id(), 0u);
  ASSERT_TRUE(no_id.has_error());
  EXPECT_EQ(no_id.error().code(), kInvalidArgument);
  EXPECT_THAT(no_id.error().message(), HasSubstr("truncated or malformed protobuf at byte 0"));
  ExpectScored(got.responses[1], reference);
  const v1::ScoreResponse& truncated = got.responses[2];
  EXPECT_EQ(truncated.request_id(), 7u);
  ASSERT_TRUE(truncated.has_error());
  EXPECT_EQ(truncated.error().code(), kInvalidArgument);
  EXPECT_THAT(truncated.error().message(),
              HasSubstr("not a valid ScoreRequest: truncated or malformed protobuf"));
  EXPECT_THAT(truncated.error().message(), HasSubstr("field tokens"));
  EXPECT_EQ(got.responses[3].request_id(), 9u);
  ExpectScored(got.responses[3], reference);
}

TEST_F(MalformedRequestE2eTest, UnaryScoreRefusesBytesThatDoNotParse) {
  std::string unused;
  grpc::Status s = Unary("/scored.v1.Scorer/Score", InvalidUtf8TextRequest(3), &unused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("invalid UTF-8 in field text.text"));

  s = Unary("/scored.v1.Scorer/Score", TruncatedRequest(3), &unused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("not a valid ScoreRequest: truncated or malformed protobuf"));
}

TEST_F(MalformedRequestE2eTest, UnaryTokenizeRefusesBytesThatDoNotParse) {
  std::string unused;
  // TokenizeRequest{text: "\xc3\x28"}: a 2-byte lead followed by no continuation byte.
  grpc::Status s = Unary("/scored.v1.Scorer/Tokenize", std::string("\x0a\x02\xc3\x28", 4), &unused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("not a valid TokenizeRequest: invalid UTF-8 in field text"));

  s = Unary("/scored.v1.Scorer/Tokenize", std::string("\x0a\x09hi", 4), &unused);  // says 9 bytes, has 2
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("not a valid TokenizeRequest: truncated or malformed protobuf"));
}

TEST_F(MalformedRequestE2eTest, WellFormedBytesStillScoreAndTokenize) {
  const v1::ScoreResponse reference = Reference();
  std::string bytes;
  ASSERT_TRUE(Unary("/scored.v1.Scorer/Score", OkRequest(11), &bytes).ok());
  v1::ScoreResponse scored;
  ASSERT_TRUE(scored.ParseFromString(bytes));
  EXPECT_EQ(scored.request_id(), 11u);
  ExpectScored(scored, reference);

  v1::TokenizeRequest req;
  req.set_text("Once upon a time");
  req.set_want_byte_lengths(true);
  auto stub = v1::Scorer::NewStub(channel_);
  grpc::ClientContext ctx;
  v1::TokenizeResponse typed;
  const grpc::Status typed_status = stub->Tokenize(&ctx, req, &typed);
  const grpc::Status raw_status = Unary("/scored.v1.Scorer/Tokenize", req.SerializeAsString(), &bytes);
  ASSERT_EQ(raw_status.error_code(), typed_status.error_code()) << raw_status.error_message();
  if (raw_status.ok()) {
    v1::TokenizeResponse raw;
    ASSERT_TRUE(raw.ParseFromString(bytes));
    EXPECT_GT(raw.ids_size(), 1);
    EXPECT_EQ(raw.SerializeAsString(), typed.SerializeAsString());
  }
}

}  // namespace
}  // namespace scored

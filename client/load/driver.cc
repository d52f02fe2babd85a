#include "client/load/driver.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/connect/security.h"
#include "engine/base/score_options.h"  // kMaxTopK

namespace scored {
namespace load {
namespace {

// How a result counts, given what the request was meant to exercise. `stream_cancelled`: the request's
// stream was cancelled by the client before it was answered.
Outcome Classify(RequestKind kind, absl::StatusCode code, bool stream_cancelled) {
  if (IsMalformed(kind)) {
    if (code == absl::StatusCode::kInvalidArgument) return Outcome::kRefused;
    if (code == absl::StatusCode::kCancelled && stream_cancelled) return Outcome::kCancelled;
    return Outcome::kUnexpected;  // a malformed request answered OK is unexpected too
  }
  if (code == absl::StatusCode::kOk) return Outcome::kOk;
  if (code == absl::StatusCode::kCancelled && (kind == RequestKind::kCancel || stream_cancelled)) {
    return Outcome::kCancelled;
  }
  return Outcome::kUnexpected;
}

}  // namespace

SharedRun::SharedRun(const LoadOptions& options, int64_t vocab_size, int32_t bos_id, absl::Time start)
    : options_(options),
      vocab_size_(vocab_size),
      bos_id_(bos_id),
      sampler_(options.lengths),
      send_until_(options.duration > absl::ZeroDuration() ? start + options.duration
                                                          : absl::InfiniteFuture()),
      tickets_left_(options.num_requests) {}

bool SharedRun::TakeTicket() {
  if (options_.stop != nullptr && options_.stop->load()) return false;
  if (absl::Now() >= send_until_) return false;
  if (options_.num_requests > 0) return tickets_left_.fetch_sub(1) > 0;
  return true;
}

RequestGenerator SharedRun::Generator(int client) const {
  return RequestGenerator(&sampler_, vocab_size_, bos_id_, options_.seed, client);
}

KindSampler SharedRun::Kinds(int client) const {
  return KindSampler(options_.cancel_fraction, options_.malformed_fraction, options_.seed, client);
}

std::mt19937_64 SharedRun::DelayRng(int client) const {
  return std::mt19937_64(static_cast<uint64_t>(client) * 0x9e3779b97f4a7c15ull + options_.seed);
}

void SharedRun::Prepare(grpc::ClientContext* context, absl::Time deadline) const {
  if (deadline != absl::InfiniteFuture()) context->set_deadline(absl::ToChronoTime(deadline));
  client::AddAuthorization(options_.security.bearer_token, context);
}

void ClientStats::Add(RequestRecord record, absl::string_view message, bool keep_record,
                      bool stream_cancelled) {
  record.outcome = Classify(record.kind, record.code, stream_cancelled);
  ++requests;
  ++kinds[record.kind];
  ++codes[record.code];
  switch (record.outcome) {
    case Outcome::kOk:
      ++requests_ok;
      tokens_ok += record.tokens;
      latencies_ms.push_back(absl::ToDoubleMilliseconds(record.end - record.start));
      last_ok_latency = record.end - record.start;
      break;
    case Outcome::kCancelled:
      ++cancelled;
      break;
    case Outcome::kRefused:
      ++refused;
      break;
    case Outcome::kUnexpected:
      if (unexpected++ == 0) {
        first_unexpected =
            absl::StrCat(RequestKindName(record.kind), ": ", absl::StatusCodeToString(record.code), ": ",
                         record.code == absl::StatusCode::kOk ? "a malformed request was answered OK"
                                                              : std::string(message));
      }
      break;
  }
  if (record.code != absl::StatusCode::kOk && first_message.find(record.code) == first_message.end()) {
    first_message[record.code] = std::string(message);
  }
  if (keep_record) records.push_back(record);
}

absl::Status CheckResponse(const scored::v1::ScoreResponse& response, int64_t n) {
  if (response.first_scored() != 1 || response.num_scored() != n - 1 || response.logprob_size() != n - 1 ||
      response.greedy_size() != n - 1) {
    return absl::InternalError(absl::StrCat("malformed response for ", n, " tokens: first_scored ",
                                            response.first_scored(), ", num_scored ", response.num_scored(),
                                            ", ", response.logprob_size(), " logprobs, ",
                                            response.greedy_size(), " greedy flags"));
  }
  for (int i = 0; i < response.logprob_size(); ++i) {
    const float lp = response.logprob(i);
    if (!std::isfinite(lp) || lp > 0.0f) {
      return absl::InternalError(
          absl::StrCat("logprob ", lp, " at position ", i + 1, " is not finite and <= 0"));
    }
  }
  return absl::OkStatus();
}

scored::v1::ScoreRequest BuildRequest(RequestKind kind, uint64_t id, const std::vector<int32_t>& ids,
                                      int64_t vocab_size) {
  scored::v1::ScoreRequest request;
  request.set_request_id(id);
  if (kind == RequestKind::kMalformedEmpty) {
    request.mutable_tokens();  // the tokens input set, with no ids
    return request;
  }
  request.mutable_tokens()->mutable_ids()->Add(ids.begin(), ids.end());
  if (kind == RequestKind::kMalformedOutOfVocab) {
    request.mutable_tokens()->set_ids(request.tokens().ids_size() - 1, static_cast<int32_t>(vocab_size));
  }
  if (kind == RequestKind::kMalformedTopK) request.set_top_k(kMaxTopK + 1);
  return request;
}

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

bool ParseBuffer(const grpc::ByteBuffer& buffer, google::protobuf::MessageLite* message) {
  grpc::Slice single;
  if (!buffer.DumpToSingleSlice(&single).ok()) return false;
  return message->ParseFromArray(single.begin(), static_cast<int>(single.size()));
}

absl::Duration CancelDelay(absl::Duration last_ok_latency, std::mt19937_64* rng) {
  const double u = static_cast<double>((*rng)() >> 11) * 0x1.0p-53;
  return last_ok_latency * u;
}

}  // namespace load
}  // namespace scored

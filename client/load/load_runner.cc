#include "client/load/load_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/connect/servers.h"
#include "client/load/request_gen.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/byte_buffer.h"
#include "scored/v1/scorer.grpc.pb.h"

namespace scored {
namespace load {
namespace {

absl::StatusCode FromGrpcCode(grpc::StatusCode code) { return static_cast<absl::StatusCode>(code); }

// What all clients of one run share; read-only except for the ticket counter.
class Shared {
 public:
  Shared(const LoadOptions& options, int64_t vocab_size, int32_t bos_id, absl::Time start)
      : options_(options),
        vocab_size_(vocab_size),
        bos_id_(bos_id),
        sampler_(options.lengths),
        send_until_(options.duration > absl::ZeroDuration() ? start + options.duration
                                                            : absl::InfiniteFuture()),
        tickets_left_(options.num_requests) {}

  // True when the caller may send one more request (takes a ticket in request-count runs).
  bool TakeTicket() {
    if (options_.stop != nullptr && options_.stop->load()) return false;
    if (absl::Now() >= send_until_) return false;
    if (options_.num_requests > 0) return tickets_left_.fetch_sub(1) > 0;
    return true;
  }

  // Client `client`'s request stream and request kinds.
  RequestGenerator Generator(int client) const {
    return RequestGenerator(&sampler_, vocab_size_, bos_id_, options_.seed, client);
  }
  KindSampler Kinds(int client) const {
    return KindSampler(options_.cancel_fraction, options_.malformed_fraction, options_.seed, client);
  }
  int64_t vocab_size() const { return vocab_size_; }

  void Prepare(grpc::ClientContext* context, absl::Time deadline) const {
    if (deadline != absl::InfiniteFuture()) context->set_deadline(absl::ToChronoTime(deadline));
    client::AddAuthorization(options_.security.bearer_token, context);
  }

  const LoadOptions& options() const { return options_; }
  absl::Time send_until() const { return send_until_; }

 private:
  const LoadOptions& options_;
  const int64_t vocab_size_;
  const int32_t bos_id_;
  const LengthSampler sampler_;
  const absl::Time send_until_;
  std::atomic<int64_t> tickets_left_;
};

// The shape every OK response must have for a request of n ids and default score_from.
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

// One client's tallies; merged into the LoadResult after every client finished.
struct ClientStats {
  int64_t requests = 0;
  int64_t requests_ok = 0;
  int64_t cancelled = 0;
  int64_t refused = 0;
  int64_t unexpected = 0;
  std::string first_unexpected;
  std::map<RequestKind, int64_t> kinds;
  int64_t tokens_ok = 0;
  std::vector<double> latencies_ms;  // OK requests
  std::map<absl::StatusCode, int64_t> codes;
  std::map<absl::StatusCode, std::string> first_message;
  std::vector<RequestRecord> records;
  bool stopped_unavailable = false;
  absl::Duration last_ok_latency = absl::Milliseconds(2);  // bounds the delay before a cancel

  // `record.outcome` is set here from its kind and code.
  void Add(RequestRecord record, absl::string_view message, bool keep_record, bool stream_cancelled = false) {
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
};

// A ScoreRequest of `kind` from the ids drawn for it (kMalformedRawBytes is never built as a message).
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
  if (kind == RequestKind::kMalformedTopK) request.set_top_k(65);
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

// A delay before cancelling: uniform in [0, last OK latency], so the cancel likely lands mid-flight.
absl::Duration CancelDelay(absl::Duration last_ok_latency, std::mt19937_64* rng) {
  const double u = static_cast<double>((*rng)() >> 11) * 0x1.0p-53;
  return last_ok_latency * u;
}

// One unary Score call of raw bytes through a generic stub (the generated one would serialize).
grpc::Status GenericUnaryScore(grpc::Channel* channel, grpc::ClientContext* context,
                               const std::string& bytes) {
  grpc::GenericStub generic(channel->shared_from_this());
  grpc::CompletionQueue cq;
  auto call = generic.PrepareUnaryCall(context, "/scored.v1.Scorer/Score", ToBuffer(bytes), &cq);
  call->StartCall();
  grpc::ByteBuffer in;
  grpc::Status status;
  call->Finish(&in, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

// Starts the call, cancels it from this thread after `delay` unless it finished first, and waits.
grpc::Status CancelledScore(scored::v1::Scorer::Stub* stub, grpc::ClientContext* context,
                            const scored::v1::ScoreRequest& request, scored::v1::ScoreResponse* response,
                            absl::Duration delay) {
  grpc::Status status;
  absl::Notification done;
  stub->async()->Score(context, &request, response, [&status, &done](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  if (!done.WaitForNotificationWithTimeout(delay)) context->TryCancel();
  done.WaitForNotification();
  return status;
}

void RunUnaryClient(int client, Shared* shared, scored::v1::Scorer::Stub* stub, grpc::Channel* channel,
                    ClientStats* stats) {
  const LoadOptions& options = shared->options();
  RequestGenerator generator = shared->Generator(client);
  KindSampler kinds = shared->Kinds(client);
  std::mt19937_64 delay_rng(static_cast<uint64_t>(client) * 0x9e3779b97f4a7c15ull + options.seed);
  std::vector<int32_t> ids;
  uint64_t next_id = 0;
  while (shared->TakeTicket()) {
    const RequestKind kind = kinds.Next();
    generator.Next(&ids);
    const uint64_t id = next_id++;
    grpc::ClientContext context;
    const absl::Time start = absl::Now();
    shared->Prepare(&context, options.deadline > absl::ZeroDuration() ? start + options.deadline
                                                                      : absl::InfiniteFuture());
    scored::v1::ScoreResponse response;
    grpc::Status status;
    int64_t n = static_cast<int64_t>(ids.size());
    if (kind == RequestKind::kMalformedRawBytes) {
      status = GenericUnaryScore(channel, &context, InvalidUtf8ScoreRequest(id));
    } else {
      const scored::v1::ScoreRequest request = BuildRequest(kind, id, ids, shared->vocab_size());
      n = request.tokens().ids_size();
      if (kind == RequestKind::kCancel) {
        status = CancelledScore(stub, &context, request, &response,
                                CancelDelay(stats->last_ok_latency, &delay_rng));
      } else {
        status = stub->Score(&context, request, &response);
      }
    }
    RequestRecord record;
    record.client = client;
    record.start = start;
    record.end = absl::Now();
    record.tokens = n;
    record.kind = kind;
    record.code = FromGrpcCode(status.error_code());
    std::string message = status.error_message();
    if (status.ok() && !IsMalformed(kind)) {
      const absl::Status shape = CheckResponse(response, n);
      record.code = shape.code();
      message = std::string(shape.message());
    }
    stats->Add(record, message, options.record_requests);
    if (record.code == absl::StatusCode::kUnavailable && options.stop_on_unavailable) {
      stats->stopped_unavailable = true;
      break;
    }
  }
}

// Open loop: one scheduler thread starts request i at start + i / rate through the callback API; each call's
// callback records it with the latency from its scheduled start. The tally is guarded by a mutex (callbacks
// run on gRPC's threads).
struct OpenLoopTally {
  double rate_achieved = 0.0;
  double lag_max_ms = 0.0;
  int64_t max_outstanding = 0;
  std::vector<int64_t> per_server;  // requests started per stub
};

// Shared-owned: each call's callback holds a reference, so that a callback still returning from the final
// Unlock never outlives the object Run's thread was waiting on.
class OpenLoop : public std::enable_shared_from_this<OpenLoop> {
 public:
  // One stub per server; each request goes to the server with the fewest outstanding (round-robin on ties).
  OpenLoop(Shared* shared, std::vector<scored::v1::Scorer::Stub*> stubs, absl::Time start, ClientStats* stats)
      : shared_(shared),
        stubs_(std::move(stubs)),
        start_(start),
        stats_(stats),
        generator_(shared->Generator(0)),
        outstanding_per_server_(stubs_.size(), 0) {
    tally_.per_server.assign(stubs_.size(), 0);
  }

  OpenLoopTally Run() {
    const LoadOptions& options = shared_->options();
    absl::Time first_sent = absl::InfinitePast(), last_sent = absl::InfinitePast();
    int64_t started = 0;
    std::vector<int32_t> ids;
    for (int64_t i = 0;; ++i) {
      // i / rate in double: no rounding of a per-request interval accumulates over a long run.
      const absl::Time scheduled = start_ + absl::Seconds(static_cast<double>(i) / options.rate);
      // Wait for the slot in short slices so that `stop` and an UNAVAILABLE end the wait early.
      for (absl::Time now = absl::Now(); now < scheduled && !Stopping(); now = absl::Now()) {
        absl::SleepFor(std::min(scheduled - now, absl::Milliseconds(50)));
      }
      if (Stopping() || scheduled >= shared_->send_until()) break;
      if (options.num_requests > 0 && !shared_->TakeTicket()) break;
      generator_.Next(&ids);
      auto* call = new Call;
      call->scheduled = scheduled;
      call->tokens = static_cast<int64_t>(ids.size());
      call->request =
          BuildRequest(RequestKind::kNormal, static_cast<uint64_t>(i), ids, shared_->vocab_size());
      shared_->Prepare(&call->context, options.deadline > absl::ZeroDuration() ? scheduled + options.deadline
                                                                               : absl::InfiniteFuture());
      {
        absl::MutexLock lock(&mu_);
        tally_.max_outstanding = std::max(tally_.max_outstanding, ++outstanding_);
        // Fewest outstanding; ties go round-robin (scanned from the one after the last choice).
        const size_t n = outstanding_per_server_.size();
        call->server = next_server_ % n;
        for (size_t k = 1; k < n; ++k) {
          const size_t i = (next_server_ + k) % n;
          if (outstanding_per_server_[i] < outstanding_per_server_[call->server]) call->server = i;
        }
        next_server_ = call->server + 1;
        ++outstanding_per_server_[call->server];
        ++tally_.per_server[call->server];
      }
      const absl::Time sent = absl::Now();
      stubs_[call->server]->async()->Score(
          &call->context, &call->request, &call->response,
          [self = shared_from_this(), call](grpc::Status status) { self->Finish(call, status); });
      if (started++ == 0) first_sent = sent;
      last_sent = sent;
      tally_.lag_max_ms = std::max(tally_.lag_max_ms, absl::ToDoubleMilliseconds(sent - scheduled));
    }
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int64_t* outstanding) { return *outstanding == 0; }, &outstanding_));
    if (started >= 2 && last_sent > first_sent) {
      tally_.rate_achieved = static_cast<double>(started - 1) / absl::ToDoubleSeconds(last_sent - first_sent);
    }
    return tally_;
  }

 private:
  struct Call {
    absl::Time scheduled;
    size_t server = 0;  // index into stubs_
    int64_t tokens = 0;
    grpc::ClientContext context;
    scored::v1::ScoreRequest request;
    scored::v1::ScoreResponse response;
  };

  bool Stopping() const {
    const std::atomic<bool>* stop = shared_->options().stop;
    return unavailable_.load() || (stop != nullptr && stop->load());
  }

  void Finish(Call* call, const grpc::Status& status) {
    RequestRecord record;
    record.start = call->scheduled;
    record.end = absl::Now();
    record.tokens = call->tokens;
    record.kind = RequestKind::kNormal;
    record.code = FromGrpcCode(status.error_code());
    std::string message = status.error_message();
    if (status.ok()) {
      const absl::Status shape = CheckResponse(call->response, call->tokens);
      record.code = shape.code();
      message = std::string(shape.message());
    }
    const size_t server = call->server;
    delete call;
    const LoadOptions& options = shared_->options();
    if (record.code == absl::StatusCode::kUnavailable && options.stop_on_unavailable) {
      unavailable_.store(true);
    }
    absl::MutexLock lock(&mu_);
    stats_->Add(record, message, options.record_requests);
    if (unavailable_.load()) stats_->stopped_unavailable = true;
    --outstanding_per_server_[server];
    --outstanding_;
  }

  Shared* const shared_;
  const std::vector<scored::v1::Scorer::Stub*> stubs_;
  const absl::Time start_;
  ClientStats* const stats_;
  RequestGenerator generator_;
  std::atomic<bool> unavailable_{false};
  OpenLoopTally tally_;  // max_outstanding under mu_; the rest by Run's thread
  absl::Mutex mu_;
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> outstanding_per_server_ ABSL_GUARDED_BY(mu_);
  size_t next_server_ ABSL_GUARDED_BY(mu_) = 0;
};

OpenLoopTally RunOpenLoop(Shared* shared, std::vector<scored::v1::Scorer::Stub*> stubs, absl::Time start,
                          ClientStats* stats) {
  return std::make_shared<OpenLoop>(shared, std::move(stubs), start, stats)->Run();
}

// One client's ScoreStream calls: a writer thread keeps up to `inflight` requests outstanding, the
// client's thread reads the responses and matches them by request_id. Messages go as raw bytes
// (ByteBuffer) so that a malformed one can be sent as it is; the stream is opened the way the
// generated stub opens it. After the client cancels a stream (a cancel-kind request), it opens the
// next one.
class StreamClient {
 public:
  StreamClient(int client, Shared* shared, grpc::Channel* channel, ClientStats* stats)
      : client_(client),
        shared_(shared),
        channel_(channel),
        stats_(stats),
        generator_(shared->Generator(client)),
        kinds_(shared->Kinds(client)),
        delay_rng_(static_cast<uint64_t>(client) * 0x9e3779b97f4a7c15ull + shared->options().seed) {}

  void Run() {
    const LoadOptions& options = shared_->options();
    absl::Time deadline = absl::InfiniteFuture();
    if (options.deadline > absl::ZeroDuration()) {
      deadline = absl::Now() + options.deadline +
                 (options.duration > absl::ZeroDuration() ? options.duration : absl::ZeroDuration());
    }
    while (RunOneStream(deadline)) {
    }
  }

 private:
  struct Pending {
    absl::Time start;
    int64_t tokens = 0;
    RequestKind kind = RequestKind::kNormal;
  };

  // One ScoreStream call; true when the client cancelled it and should open another.
  bool RunOneStream(absl::Time deadline) {
    static const grpc::internal::RpcMethod kScoreStream("/scored.v1.Scorer/ScoreStream",
                                                        grpc::internal::RpcMethod::BIDI_STREAMING);
    const LoadOptions& options = shared_->options();
    context_ = std::make_unique<grpc::ClientContext>();
    shared_->Prepare(context_.get(), deadline);
    stream_.reset(grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
        channel_, kScoreStream, context_.get()));
    {
      absl::MutexLock lock(&mu_);
      stop_writing_ = false;
      cancelled_ = false;
    }
    std::thread writer([this] { WriteLoop(); });

    grpc::ByteBuffer buffer;
    while (stream_->Read(&buffer)) HandleResponse(buffer);
    {
      absl::MutexLock lock(&mu_);
      stop_writing_ = true;
    }
    writer.join();
    const grpc::Status finish = stream_->Finish();

    // Requests never answered take the stream's final status.
    absl::MutexLock lock(&mu_);
    if (finish.error_code() == grpc::StatusCode::UNAVAILABLE && options.stop_on_unavailable) {
      stats_->stopped_unavailable = true;
    }
    for (const auto& [id, pending] : pending_) {
      RequestRecord record;
      record.client = client_;
      record.start = pending.start;
      record.end = absl::Now();
      record.tokens = pending.tokens;
      record.kind = pending.kind;
      std::string message;
      if (finish.ok()) {
        record.code = absl::StatusCode::kInternal;
        message = absl::StrCat("ScoreStream ended without a response to request ", id);
      } else {
        record.code = FromGrpcCode(finish.error_code());
        message = finish.error_message();
      }
      if (record.code == absl::StatusCode::kUnavailable && options.stop_on_unavailable) {
        stats_->stopped_unavailable = true;
      }
      stats_->Add(record, message, options.record_requests, cancelled_);
    }
    pending_.clear();
    return cancelled_ && !stats_->stopped_unavailable;
  }

  void WriteLoop() {
    const int inflight = shared_->options().inflight;
    std::vector<int32_t> ids;
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this, inflight]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_writing_ || static_cast<int>(pending_.size()) < inflight;
        };
        mu_.Await(absl::Condition(&ready));
        if (stop_writing_) break;
      }
      if (!shared_->TakeTicket()) break;
      const uint64_t id = next_id_++;
      const RequestKind kind = kinds_.Next();
      generator_.Next(&ids);
      std::string bytes;
      int64_t n = static_cast<int64_t>(ids.size());
      if (kind == RequestKind::kMalformedRawBytes) {
        bytes = InvalidUtf8ScoreRequest(id);
      } else {
        const scored::v1::ScoreRequest request = BuildRequest(kind, id, ids, shared_->vocab_size());
        n = request.tokens().ids_size();
        bytes = request.SerializeAsString();
      }
      absl::Duration cancel_delay;
      {
        // Registered before the write so that a fast response always finds its entry.
        absl::MutexLock lock(&mu_);
        pending_[id] = Pending{absl::Now(), n, kind};
        cancel_delay = CancelDelay(stats_->last_ok_latency, &delay_rng_);
      }
      if (!stream_->Write(ToBuffer(bytes))) break;  // the call is over; Finish() gives the reason
      if (kind == RequestKind::kCancel) {
        absl::SleepFor(cancel_delay);
        absl::MutexLock lock(&mu_);
        if (stop_writing_) break;  // the stream ended meanwhile
        cancelled_ = true;
        context_->TryCancel();
        return;
      }
    }
    stream_->WritesDone();
  }

  void HandleResponse(const grpc::ByteBuffer& buffer) {
    const LoadOptions& options = shared_->options();
    RequestRecord record;
    record.client = client_;
    record.end = absl::Now();
    std::string message;
    scored::v1::ScoreResponse response;
    absl::MutexLock lock(&mu_);
    const bool parsed = ParseBuffer(buffer, &response);
    auto it = parsed ? pending_.find(response.request_id()) : pending_.end();
    if (!parsed) {
      record.start = record.end;
      record.code = absl::StatusCode::kInternal;
      message = "ScoreStream sent a response that does not parse";
    } else if (it == pending_.end()) {
      record.start = record.end;
      record.code = absl::StatusCode::kInternal;
      message = absl::StrCat("ScoreStream answered unknown or repeated request_id ", response.request_id());
    } else {
      record.start = it->second.start;
      record.tokens = it->second.tokens;
      record.kind = it->second.kind;
      pending_.erase(it);
      if (response.has_error()) {
        record.code = static_cast<absl::StatusCode>(response.error().code());
        message = response.error().message();
      } else if (!IsMalformed(record.kind)) {
        const absl::Status shape = CheckResponse(response, record.tokens);
        record.code = shape.code();
        message = std::string(shape.message());
      }
    }
    stats_->Add(record, message, options.record_requests);
    if (record.code == absl::StatusCode::kUnavailable && options.stop_on_unavailable) {
      stats_->stopped_unavailable = true;
      stop_writing_ = true;
    }
  }

  const int client_;
  Shared* const shared_;
  grpc::Channel* const channel_;
  ClientStats* const stats_;  // written under mu_ while the writer runs, by Run() after it ended
  // Used by the writer thread only (across streams).
  RequestGenerator generator_;
  KindSampler kinds_;
  uint64_t next_id_ = 0;
  std::mt19937_64 delay_rng_ ABSL_GUARDED_BY(mu_);
  // Per stream; replaced by RunOneStream while no writer runs.
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream_;

  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  bool stop_writing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;  // this stream was cancelled by the writer
};

}  // namespace

const char* OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kOk:
      return "ok";
    case Outcome::kCancelled:
      return "cancelled";
    case Outcome::kRefused:
      return "refused";
    case Outcome::kUnexpected:
      return "unexpected";
  }
  return "unknown";
}

absl::StatusOr<Mode> ParseMode(absl::string_view text) {
  if (text == "unary") return Mode::kUnary;
  if (text == "stream") return Mode::kStream;
  return absl::InvalidArgumentError(absl::StrCat("mode must be unary or stream, got '", text, "'"));
}

const char* ModeName(Mode mode) { return mode == Mode::kUnary ? "unary" : "stream"; }

absl::Status ValidateLoadOptions(const LoadOptions& options) {
  if (options.server.empty()) return absl::InvalidArgumentError("server address is empty");
  if (options.concurrency < 1) {
    return absl::InvalidArgumentError(absl::StrCat("concurrency must be >= 1, got ", options.concurrency));
  }
  if (options.inflight < 1) {
    return absl::InvalidArgumentError(absl::StrCat("inflight must be >= 1, got ", options.inflight));
  }
  const bool by_time = options.duration > absl::ZeroDuration();
  const bool by_count = options.num_requests > 0;
  if (by_time == by_count) {
    return absl::InvalidArgumentError("give exactly one of a duration > 0 or a request count > 0");
  }
  if (options.num_requests < 0) {
    return absl::InvalidArgumentError(absl::StrCat("request count must be >= 0, got ", options.num_requests));
  }
  if (options.lengths.empty()) return absl::InvalidArgumentError("the length mix is empty");
  for (const LengthBucket& b : options.lengths) {
    if (b.tokens < 2 || !std::isfinite(b.weight) || b.weight <= 0.0) {
      return absl::InvalidArgumentError(absl::StrCat("length mix entry ", b.tokens, ":", b.weight,
                                                     " is invalid (tokens >= 2, weight > 0)"));
    }
  }
  if (options.deadline < absl::ZeroDuration()) return absl::InvalidArgumentError("deadline must be >= 0");
  for (const auto& [name, f] : {std::pair<const char*, double>{"cancel_fraction", options.cancel_fraction},
                                {"malformed_fraction", options.malformed_fraction}}) {
    if (!(f >= 0.0 && f <= 1.0)) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be in [0, 1], got ", f));
    }
  }
  if (options.cancel_fraction + options.malformed_fraction > 1.0) {
    return absl::InvalidArgumentError("cancel_fraction + malformed_fraction must be <= 1");
  }
  if (!(options.rate >= 0.0) || !std::isfinite(options.rate)) {
    return absl::InvalidArgumentError(absl::StrCat("rate must be >= 0, got ", options.rate));
  }
  if (options.rate > 0.0) {
    if (options.mode != Mode::kUnary) return absl::InvalidArgumentError("rate (open loop) needs unary mode");
    if (options.cancel_fraction > 0.0 || options.malformed_fraction > 0.0) {
      return absl::InvalidArgumentError(
          "rate (open loop) sends normal requests only: cancel_fraction and "
          "malformed_fraction must be 0");
    }
  }
  return absl::OkStatus();
}

namespace {

// One server of the run: its channel, stub and model.
struct Target {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<scored::v1::Scorer::Stub> stub;
  scored::v1::ModelInfo info;
};

absl::StatusOr<Target> Connect(const LoadOptions& options, const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  Target t;
  t.address = address;
  t.channel = grpc::CreateCustomChannel(address, client::ChannelCredentials(options.security), args);
  if (!t.channel->WaitForConnected(absl::ToChronoTime(absl::Now() + options.connect_timeout))) {
    return absl::UnavailableError(absl::StrCat(
        "cannot connect to scored at ", address, " within ", absl::FormatDuration(options.connect_timeout),
        options.security.tls
            ? " (is the server running there, speaking TLS with a certificate --tls_ca trusts, "
              "and accepting this client's certificate?)"
            : " (is the server running and listening there?)"));
  }
  t.stub = scored::v1::Scorer::NewStub(t.channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options.connect_timeout));
  client::AddAuthorization(options.security.bearer_token, &context);
  const grpc::Status status = t.stub->GetModelInfo(&context, scored::v1::GetModelInfoRequest(), &t.info);
  if (!status.ok()) {
    return absl::Status(FromGrpcCode(status.error_code()),
                        absl::StrCat("GetModelInfo", address == options.server ? "" : " of " + address, ": ",
                                     status.error_message()));
  }
  if (t.info.vocab_size() < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("server ", address, " reports vocab_size ", t.info.vocab_size()));
  }
  for (const LengthBucket& b : options.lengths) {
    if (t.info.max_seq_len() > 0 && b.tokens > t.info.max_seq_len()) {
      return absl::InvalidArgumentError(
          absl::StrCat("length ", b.tokens, " exceeds the server's max_seq_len ", t.info.max_seq_len(),
                       address == options.server ? "" : " (" + address + ")"));
    }
    if (t.info.max_batch_tokens() > 0 && b.tokens > t.info.max_batch_tokens()) {
      return absl::InvalidArgumentError(
          absl::StrCat("length ", b.tokens, " exceeds the server's max_batch_tokens ",
                       t.info.max_batch_tokens(), address == options.server ? "" : " (" + address + ")"));
    }
  }
  return t;
}

}  // namespace

absl::StatusOr<LoadResult> RunLoad(const LoadOptions& options) {
  absl::Status valid = ValidateLoadOptions(options);
  if (!valid.ok()) return valid;

  absl::StatusOr<std::vector<std::string>> addresses = client::ResolveServers(options.server);
  if (!addresses.ok()) return addresses.status();
  std::vector<Target> targets;
  std::vector<scored::v1::ModelInfo> infos;
  for (const std::string& address : *addresses) {
    absl::StatusOr<Target> t = Connect(options, address);
    if (!t.ok()) return t.status();
    infos.push_back(t->info);
    targets.push_back(*std::move(t));
  }
  absl::Status same = client::CheckSameModel(*addresses, infos);
  if (!same.ok()) return same;
  const scored::v1::ModelInfo& info = targets[0].info;

  LoadResult result;
  result.server = options.server;
  result.mode = options.mode;
  result.concurrency = options.concurrency;
  result.inflight = options.mode == Mode::kStream ? options.inflight : 1;
  result.lengths = FormatLengthMix(options.lengths);
  result.seed = options.seed;
  result.cancel_fraction = options.cancel_fraction;
  result.malformed_fraction = options.malformed_fraction;
  result.model_architecture = info.architecture();
  result.model_format = info.format();
  result.backend = info.backend();
  result.vocab_size = info.vocab_size();
  result.max_seq_len = info.max_seq_len();

  result.rate = options.rate;
  const absl::Time start = absl::Now();
  Shared shared(options, info.vocab_size(), info.bos_id(), start);
  std::vector<ClientStats> stats(static_cast<size_t>(options.rate > 0.0 ? 1 : options.concurrency));
  std::vector<std::thread> threads;
  threads.reserve(stats.size());
  result.servers = *addresses;
  result.requests_per_server.assign(targets.size(), 0);
  if (options.rate > 0.0) {
    result.concurrency = 0;
    std::vector<scored::v1::Scorer::Stub*> stubs;
    for (Target& t : targets) stubs.push_back(t.stub.get());
    const OpenLoopTally tally = RunOpenLoop(&shared, std::move(stubs), start, &stats[0]);
    result.requests_per_server = tally.per_server;
    result.rate_achieved = tally.rate_achieved;
    result.schedule_lag_max_ms = tally.lag_max_ms;
    result.max_outstanding = tally.max_outstanding;
  }
  // Closed loop: client c talks to server c mod the number of servers.
  for (int c = 0; c < options.concurrency && options.rate <= 0.0; ++c) {
    ClientStats* s = &stats[static_cast<size_t>(c)];
    Target& t = targets[static_cast<size_t>(c) % targets.size()];
    grpc::Channel* channel = t.channel.get();
    if (options.mode == Mode::kUnary) {
      threads.emplace_back(RunUnaryClient, c, &shared, t.stub.get(), channel, s);
    } else {
      threads.emplace_back([c, &shared, channel, s] { StreamClient(c, &shared, channel, s).Run(); });
    }
  }
  for (std::thread& t : threads) t.join();
  result.wall = absl::Now() - start;

  std::vector<double> latencies;
  for (size_t c = 0; c < stats.size(); ++c) {
    ClientStats& s = stats[c];
    if (options.rate <= 0.0) result.requests_per_server[c % targets.size()] += s.requests;
    ++result.clients_finished;
    if (s.stopped_unavailable) ++result.clients_stopped_unavailable;
    result.requests += s.requests;
    result.requests_ok += s.requests_ok;
    result.cancelled += s.cancelled;
    result.refused += s.refused;
    result.unexpected += s.unexpected;
    if (result.first_unexpected.empty()) result.first_unexpected = s.first_unexpected;
    for (const auto& [kind, count] : s.kinds) result.kinds[kind] += count;
    result.tokens_ok += s.tokens_ok;
    latencies.insert(latencies.end(), s.latencies_ms.begin(), s.latencies_ms.end());
    for (const auto& [code, count] : s.codes) result.codes[code] += count;
    for (const auto& [code, message] : s.first_message) result.first_message.emplace(code, message);
    result.records.insert(result.records.end(), s.records.begin(), s.records.end());
  }
  result.latency_ok = SummarizeLatencies(&latencies);
  const double seconds = absl::ToDoubleSeconds(result.wall);
  if (seconds > 0.0) {
    result.requests_per_s = static_cast<double>(result.requests_ok) / seconds;
    result.tokens_per_s = static_cast<double>(result.tokens_ok) / seconds;
  }
  return result;
}

}  // namespace load
}  // namespace scored

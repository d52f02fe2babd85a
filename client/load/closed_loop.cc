#include "client/load/closed_loop.h"

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"

namespace scored {
namespace load {
namespace {

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

}  // namespace

void RunUnaryClient(int client, SharedRun* shared, scored::v1::Scorer::Stub* stub, grpc::Channel* channel,
                    ClientStats* stats) {
  const LoadOptions& options = shared->options();
  RequestGenerator generator = shared->Generator(client);
  KindSampler kinds = shared->Kinds(client);
  std::mt19937_64 delay_rng = shared->DelayRng(client);
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

}  // namespace load
}  // namespace scored

#include "server/scorer_service.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/grpc_status.h"
#include "server/score_call.h"
#include "server/score_stream.h"
#include "server/score_unary.h"

namespace scored {
namespace {

// A ScoreStream refused before its first read (no token, failed engine): finishes at once.
class RejectedStreamReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit RejectedStreamReactor(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

ScorerService::ScorerService(Config config) : config_(std::move(config)) {}

grpc::ServerUnaryReactor* ScorerService::Score(grpc::CallbackServerContext* context,
                                               const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  return StartScore(&config_, context, *request, response);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ScorerService::ScoreStream(
    grpc::CallbackServerContext* context) {
  const ScoreGate& gate = *config_.gate;
  const absl::Status admitted = gate.Admit(*context);
  absl::StatusOr<ConnectionLimiter::Slot> slot = admitted.ok()
                                                     ? gate.TakeSlot(context->peer(), "ScoreStream")
                                                     : absl::StatusOr<ConnectionLimiter::Slot>(admitted);
  if (!slot.ok()) {
    const grpc::Status g = ToGrpcStatus(slot.status());
    gate.metrics()->RecordRequest("ScoreStream", g.error_code(), 0.0);
    return new RejectedStreamReactor(g);
  }
  auto* reactor = new StreamReactor(this, context, *std::move(slot));
  bool draining = false;
  {
    absl::MutexLock lock(&streams_mu_);
    streams_.insert(reactor);
    draining = shutting_down_;
  }
  reactor->Begin(draining);
  return reactor;
}

void ScorerService::Unregister(StreamReactor* stream) {
  absl::MutexLock lock(&streams_mu_);
  streams_.erase(stream);
}

void ScorerService::BeginShutdown() {
  std::vector<std::pair<StreamReactor*, StreamReactor::Actions>> todo;
  {
    absl::MutexLock lock(&streams_mu_);
    shutting_down_ = true;
    for (StreamReactor* s : streams_) todo.emplace_back(s, s->MarkDraining());
  }
  // Each reactor stays alive until the operation decided for it runs (see StreamReactor).
  for (auto& [stream, actions] : todo) StreamReactor::Perform(stream, actions);
}

grpc::ServerUnaryReactor* ScorerService::Tokenize(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* raw_request,
                                                  grpc::ByteBuffer* raw_response) {
  return StartTokenize(&config_, context, *raw_request, raw_response);
}

grpc::ServerUnaryReactor* ScorerService::GetModelInfo(grpc::CallbackServerContext* context,
                                                      const v1::GetModelInfoRequest* /*request*/,
                                                      v1::ModelInfo* response) {
  const absl::Time start = absl::Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const grpc::Status g = ToGrpcStatus(config_.gate->Admit(*context));
  if (g.ok()) *response = config_.model_info;
  config_.gate->metrics()->RecordRequest("GetModelInfo", g.error_code(), SecondsSince(start));
  reactor->Finish(g);
  return reactor;
}

}  // namespace scored

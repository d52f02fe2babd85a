#include "server/scorer_service.h"

#include <chrono>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/grpc_status.h"

namespace scored {
namespace {

absl::Time CallDeadline(const grpc::CallbackServerContext* context) {
  const std::chrono::system_clock::time_point d = context->deadline();
  if (d == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(d);
}

double SecondsSince(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

// A call whose deadline passes is cancelled; report that as DEADLINE_EXCEEDED, not CANCELLED. The
// server's deadline comes from the grpc-timeout header, so it lies slightly after the client's, whose
// own timer usually fires first and cancels the call: a cancellation within kDeadlineSlack of the
// deadline is that timer.
constexpr absl::Duration kDeadlineSlack = absl::Milliseconds(100);

absl::Status ExplainCancel(const absl::Status& status, absl::Time deadline) {
  if (status.code() == absl::StatusCode::kCancelled && absl::Now() + kDeadlineSlack >= deadline) {
    return absl::DeadlineExceededError("the deadline passed before the request was scored");
  }
  return status;
}

// Every Scorer call first passes here: the bearer token (if configured), then the engine's health.
absl::Status Admit(const ScorerService::Config& config, const grpc::CallbackServerContext& context) {
  if (config.auth != nullptr) {
    absl::Status authenticated = config.auth->Check(context);
    if (!authenticated.ok()) return authenticated;
  }
  absl::Status fatal = config.batcher->fatal_status();
  if (!fatal.ok()) {
    return absl::UnavailableError(absl::StrCat("the engine failed and cannot serve: ", fatal.message()));
  }
  return absl::OkStatus();
}

// A ScoreStream refused before its first read (no token, failed engine): finishes at once.
class RejectedStreamReactor final : public grpc::ServerBidiReactor<v1::ScoreRequest, v1::ScoreResponse> {
 public:
  explicit RejectedStreamReactor(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

// Unary Score: validate, queue, answer from the batcher's callback.
class ScoreReactor final : public grpc::ServerUnaryReactor {
 public:
  ScoreReactor(const ScorerService::Config* config, grpc::CallbackServerContext* context,
               const v1::ScoreRequest* request, v1::ScoreResponse* response)
      : config_(config), context_(context), request_(request), response_(response) {}

  void Start() {
    absl::Status admitted = Admit(*config_, *context_);
    if (!admitted.ok()) {
      FinishWith(admitted);
      return;
    }
    absl::StatusOr<ScoreRequest> engine_request =
        ToEngineRequest(*request_, config_->limits, config_->tokenizer);
    if (!engine_request.ok()) {
      FinishWith(engine_request.status());
      return;
    }
    engine_request_ = *engine_request;
    absl::StatusOr<uint64_t> ticket;
    bool cancel_now = false;
    {
      // Held across Submit so that the result callback (worker thread) waits until Start is done.
      absl::MutexLock lock(&mu_);
      ticket = config_->batcher->Submit(std::move(*engine_request), CallDeadline(context_),
                                        [this](absl::StatusOr<ScoreResult> r) { OnResult(std::move(r)); });
      if (ticket.ok()) {
        ticket_ = *ticket;
        cancel_now = cancelled_;
      }
    }
    if (!ticket.ok()) {
      FinishWith(ticket.status());
      return;
    }
    if (cancel_now) config_->batcher->Cancel(*ticket);
  }

  void OnCancel() override {
    uint64_t ticket = 0;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      ticket = ticket_;
    }
    if (ticket != 0) config_->batcher->Cancel(ticket);
  }

  void OnDone() override { delete this; }

 private:
  void OnResult(absl::StatusOr<ScoreResult> result) {
    { absl::MutexLock lock(&mu_); }  // Start() has returned from Submit
    if (!result.ok()) {
      FinishWith(ExplainCancel(result.status(), CallDeadline(context_)));
      return;
    }
    FillScoreResponse(engine_request_, *result, request_->has_text(), request_->request_id(), response_);
    FinishWith(absl::OkStatus());
  }

  void FinishWith(const absl::Status& status) {
    const grpc::Status g = ToGrpcStatus(status);
    config_->metrics->RecordRequest("Score", g.error_code(), SecondsSince(start_));
    Finish(g);
  }

  const ScorerService::Config* const config_;
  grpc::CallbackServerContext* const context_;
  const v1::ScoreRequest* const request_;
  v1::ScoreResponse* const response_;
  const absl::Time start_ = absl::Now();
  ScoreRequest engine_request_;
  absl::Mutex mu_;
  uint64_t ticket_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

// Bidi ScoreStream. All state changes happen under mu_ in one step that also decides the next gRPC
// operations (Actions); the operations run after the lock is released. `busy_` counts operations
// decided but not yet started, and Finish is only decided when nothing is busy, pending, being
// written or (unless the stream is ending) being read, so `this` stays alive while a thread holds an
// operation to run; a thread left with nothing to run must not touch it again (Perform).
class StreamReactor final : public grpc::ServerBidiReactor<v1::ScoreRequest, v1::ScoreResponse> {
 public:
  StreamReactor(ScorerService* service, grpc::CallbackServerContext* context)
      : service_(service), config_(&service->config()), context_(context) {}

  struct Actions {
    const v1::ScoreResponse* write = nullptr;
    bool read = false;
    bool finish = false;
    grpc::Status status;
  };

  // Called once, right after construction (by ScorerService::ScoreStream).
  void Begin(bool draining) {
    Actions a;
    {
      absl::MutexLock lock(&mu_);
      draining_ = draining;
      a = DecideLocked();
    }
    Perform(this, a);
  }

  // Server shutdown. Returns the actions the caller must Perform() (after releasing its own locks).
  Actions MarkDraining() {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    return DecideLocked();
  }

  // Runs `a` on `self`. With nothing to do it returns without touching `self`: once a thread has released
  // mu_ holding no write, read or finish, another thread may finish the stream and delete the reactor, so
  // even a member call on it would be a use after free.
  static void Perform(StreamReactor* self, const Actions& a) {
    if (a.write == nullptr && !a.read && !a.finish) return;
    self->Run(a);
  }

  void Run(const Actions& a) {
    if (a.finish) {
      Finish(a.status);
      return;
    }
    if (a.write != nullptr) StartWrite(a.write);
    if (a.read) StartRead(&read_buf_);
    if (a.write != nullptr || a.read) {
      Actions next;
      {
        absl::MutexLock lock(&mu_);
        --busy_;
        next = DecideLocked();
      }
      Perform(this, next);
    }
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Actions a;
      {
        absl::MutexLock lock(&mu_);
        read_in_flight_ = false;
        reads_done_ = true;
        a = DecideLocked();
      }
      Perform(this, a);
      return;
    }
    v1::ScoreRequest request = std::move(read_buf_);
    read_buf_.Clear();
    const absl::Time start = absl::Now();
    const uint64_t request_id = request.request_id();
    const bool echo = request.has_text();

    absl::Status error;
    absl::StatusOr<ScoreRequest> engine_request;
    bool draining = false;
    {
      absl::MutexLock lock(&mu_);
      draining = draining_;
    }
    if (draining) {
      error = absl::UnavailableError("the server is shutting down");
    } else {
      engine_request = ToEngineRequest(request, config_->limits, config_->tokenizer);
      if (!engine_request.ok()) error = engine_request.status();
    }

    Actions a;
    {
      absl::MutexLock lock(&mu_);
      read_in_flight_ = false;
      // A read can complete after the call was cancelled or finished (draining); nothing may be
      // queued then, or its result would arrive after OnDone deleted this reactor.
      if (error.ok() && (finish_called_ || cancelled_ || write_failed_)) {
        error = absl::CancelledError("the stream ended before the request was queued");
      }
      if (error.ok()) {
        auto kept = std::make_shared<const ScoreRequest>(*engine_request);
        auto ticket_slot = std::make_shared<uint64_t>(0);  // written below, before OnResult can run
        ++pending_;
        // Held across Submit: the result callback needs mu_, so it runs after this step is complete.
        absl::StatusOr<uint64_t> ticket = config_->batcher->Submit(
            std::move(*engine_request), CallDeadline(context_),
            [this, kept, ticket_slot, request_id, echo, start](absl::StatusOr<ScoreResult> r) {
              OnResult(*kept, ticket_slot, request_id, echo, start, std::move(r));
            });
        if (ticket.ok()) {
          *ticket_slot = *ticket;
          tickets_.insert(*ticket);
        } else {
          --pending_;
          error = ticket.status();
        }
      }
      if (!error.ok()) EnqueueErrorLocked(request_id, error, start);
      a = DecideLocked();
    }
    Perform(this, a);
  }

  void OnWriteDone(bool ok) override {
    Actions a;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      responses_.pop_front();
      if (!ok) {
        write_failed_ = true;
        responses_.clear();
      }
      a = DecideLocked();
    }
    Perform(this, a);
  }

  void OnCancel() override {
    std::vector<uint64_t> tickets;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      if (!writing_) responses_.clear();  // else OnWriteDone pops the one being written
      tickets.assign(tickets_.begin(), tickets_.end());
    }
    for (uint64_t t : tickets) config_->batcher->Cancel(t);
    Actions a;
    {
      absl::MutexLock lock(&mu_);
      a = DecideLocked();
    }
    Perform(this, a);
  }

  void OnDone() override {
    service_->Unregister(this);
    delete this;
  }

 private:
  // `ticket` is written by OnReadDone under mu_ before OnResult can take mu_.
  void OnResult(const ScoreRequest& request, const std::shared_ptr<uint64_t>& ticket, uint64_t request_id,
                bool echo, absl::Time start, absl::StatusOr<ScoreResult> result) {
    v1::ScoreResponse response;
    if (result.ok()) FillScoreResponse(request, *result, echo, request_id, &response);
    Actions a;
    {
      absl::MutexLock lock(&mu_);
      --pending_;
      tickets_.erase(*ticket);
      if (result.ok()) {
        config_->metrics->RecordRequest("ScoreStream", grpc::StatusCode::OK, SecondsSince(start));
        if (!cancelled_ && !write_failed_) responses_.push_back(std::move(response));
      } else {
        EnqueueErrorLocked(request_id, ExplainCancel(result.status(), CallDeadline(context_)), start);
      }
      a = DecideLocked();
    }
    Perform(this, a);
  }

  void EnqueueErrorLocked(uint64_t request_id, const absl::Status& status, absl::Time start)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const grpc::StatusCode code = ToGrpcCode(status.code());
    config_->metrics->RecordRequest("ScoreStream", code, SecondsSince(start));
    if (cancelled_ || write_failed_) return;
    v1::ScoreResponse response;
    response.set_request_id(request_id);
    response.mutable_error()->set_code(static_cast<int32_t>(code));
    response.mutable_error()->set_message(std::string(status.message()));
    responses_.push_back(std::move(response));
  }

  Actions DecideLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Actions a;
    if (finish_called_) return a;
    if (!writing_ && !responses_.empty() && !cancelled_ && !write_failed_) {
      writing_ = true;
      a.write = &responses_.front();  // deque: push_back never moves the front element
    }
    if (!read_in_flight_ && !reads_done_ && !draining_ && !cancelled_ && !write_failed_ &&
        pending_ + static_cast<int>(responses_.size()) < config_->stream_window) {
      read_in_flight_ = true;
      a.read = true;
    }
    if (a.write != nullptr || a.read) {
      ++busy_;
      return a;
    }
    const bool ending = reads_done_ || draining_ || cancelled_ || write_failed_;
    // Unwritten responses of a cancelled or broken stream can never be written: they do not count.
    const bool idle =
        busy_ == 0 && !writing_ && pending_ == 0 && (responses_.empty() || cancelled_ || write_failed_);
    // While reading normally, a read is always in flight; it may stay outstanding only if ending.
    if (ending && idle) {
      finish_called_ = true;
      a.finish = true;
      if (!reads_done_ && draining_ && !cancelled_) {
        a.status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down");
      } else if (cancelled_) {
        a.status = grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled");
      } else {
        a.status = grpc::Status::OK;
      }
    }
    return a;
  }

  ScorerService* const service_;
  const ScorerService::Config* const config_;
  grpc::CallbackServerContext* const context_;
  v1::ScoreRequest read_buf_;  // owned by the read in flight

  absl::Mutex mu_;
  std::deque<v1::ScoreResponse> responses_ ABSL_GUARDED_BY(mu_);  // front is being written if writing_
  std::set<uint64_t> tickets_ ABSL_GUARDED_BY(mu_);
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  int busy_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool read_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
};

ScorerService::ScorerService(Config config) : config_(std::move(config)) {}

grpc::ServerUnaryReactor* ScorerService::Score(grpc::CallbackServerContext* context,
                                               const v1::ScoreRequest* request, v1::ScoreResponse* response) {
  auto* reactor = new ScoreReactor(&config_, context, request, response);
  reactor->Start();
  return reactor;
}

grpc::ServerBidiReactor<v1::ScoreRequest, v1::ScoreResponse>* ScorerService::ScoreStream(
    grpc::CallbackServerContext* context) {
  absl::Status admitted = Admit(config_, *context);
  if (!admitted.ok()) {
    const grpc::Status g = ToGrpcStatus(admitted);
    config_.metrics->RecordRequest("ScoreStream", g.error_code(), 0.0);
    return new RejectedStreamReactor(g);
  }
  auto* reactor = new StreamReactor(this, context);
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
                                                  const v1::TokenizeRequest* request,
                                                  v1::TokenizeResponse* response) {
  const absl::Time start = absl::Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status status = Admit(config_, *context);
  if (status.ok() && config_.tokenizer == nullptr) {
    status = absl::FailedPreconditionError("the model folder has no tokenizer");
  }
  if (status.ok()) {
    absl::StatusOr<std::vector<int32_t>> ids =
        TokenizeWithBos(*config_.tokenizer, request->text(), request->has_add_bos(), request->add_bos());
    if (!ids.ok()) {
      status = ids.status();
    } else {
      response->mutable_ids()->Assign(ids->begin(), ids->end());
      if (request->want_byte_lengths()) {
        for (int32_t id : *ids) {
          response->add_byte_lengths(static_cast<int32_t>(config_.tokenizer->TokenByteLength(id)));
        }
      }
    }
  }
  const grpc::Status g = ToGrpcStatus(status);
  config_.metrics->RecordRequest("Tokenize", g.error_code(), SecondsSince(start));
  reactor->Finish(g);
  return reactor;
}

grpc::ServerUnaryReactor* ScorerService::GetModelInfo(grpc::CallbackServerContext* context,
                                                      const v1::GetModelInfoRequest* /*request*/,
                                                      v1::ModelInfo* response) {
  const absl::Time start = absl::Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const grpc::Status g = ToGrpcStatus(Admit(config_, *context));
  if (g.ok()) *response = config_.model_info;
  config_.metrics->RecordRequest("GetModelInfo", g.error_code(), SecondsSince(start));
  reactor->Finish(g);
  return reactor;
}

}  // namespace scored

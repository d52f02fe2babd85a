#include "server/score_unary.h"

#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/admission.h"
#include "server/grpc_status.h"
#include "server/request_validation.h"
#include "server/score_call.h"
#include "server/wire_scan.h"

namespace scored {
namespace {

// The memory-budget charge of `bytes` into `charge` (held until gRPC deletes the reactor).
absl::Status Charge(const ScoreGate& gate, int64_t bytes, const char* method, MemoryBudget::Charge* charge) {
  absl::StatusOr<MemoryBudget::Charge> taken = gate.Charge(bytes, method);
  if (!taken.ok()) return taken.status();
  *charge = *std::move(taken);
  return absl::OkStatus();
}

// What both unary reactors hold: the call, its connection slot and budget charge (released when gRPC deletes
// the reactor, after the response was sent), and the one way it finishes, counted in
// scored_requests_total{method} with its latency.
class UnaryCall : public grpc::ServerUnaryReactor {
 public:
  void OnDone() override { delete this; }

 protected:
  UnaryCall(const char* method, const ScorerService::Config* config, grpc::CallbackServerContext* context,
            grpc::ByteBuffer* response)
      : method_(method), gate_(*config->gate), context_(context), response_(response) {}

  // The token and the engine's health, then the call's --max_connections slot (into slot_).
  absl::Status Admit() {
    absl::Status admitted = gate_.Admit(*context_);
    if (!admitted.ok()) return admitted;
    absl::StatusOr<ConnectionLimiter::Slot> taken = gate_.TakeSlot(context_->peer(), method_);
    if (!taken.ok()) return taken.status();
    slot_ = *std::move(taken);
    return absl::OkStatus();
  }

  void FinishWith(const absl::Status& status) {
    const grpc::Status g = ToGrpcStatus(status);
    gate_.metrics()->RecordRequest(method_, g.error_code(), SecondsSince(start_));
    Finish(g);
  }

  const char* const method_;
  const ScoreGate& gate_;
  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer* const response_;
  const absl::Time start_ = absl::Now();
  ConnectionLimiter::Slot slot_;
  MemoryBudget::Charge charge_;
};

// Unary Score: parse, validate, queue, answer from the batcher's callback.
class ScoreReactor final : public UnaryCall {
 public:
  ScoreReactor(const ScorerService::Config* config, grpc::CallbackServerContext* context,
               grpc::ByteBuffer* response)
      : UnaryCall("Score", config, context, response) {}

  void Start(const grpc::ByteBuffer& raw_request) {
    absl::Status admitted = Admit();
    if (!admitted.ok()) {
      FinishWith(admitted);
      return;
    }
    absl::Status parsed = ParseRequest(raw_request, &request_, nullptr);
    if (!parsed.ok()) {
      FinishWith(parsed);
      return;
    }
    raw_bytes_ = static_cast<int64_t>(raw_request.Length());
    if (!request_.has_text()) {
      Queue();
      return;
    }
    // Text: checked here, tokenized on the pool, which then queues the ids.
    has_text_ = true;
    absl::Status queued = gate_.CheckText(request_.text().text());
    if (queued.ok()) queued = gate_.SubmitTokenization([this] { TokenizeThenQueue(); });
    if (!queued.ok()) FinishWith(queued);
  }

  void OnCancel() override {
    tokenize_cancelled_.store(true);
    uint64_t ticket = 0;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      ticket = ticket_;
    }
    if (ticket != 0) gate_.batcher()->Cancel(ticket);
  }

 private:
  // On a pool thread: the text becomes the request's token ids (stopping past max_seq_len), then Queue().
  void TokenizeThenQueue() {
    const v1::TextInput& input = request_.text();
    absl::StatusOr<std::vector<int32_t>> ids = gate_.Tokenize(
        "Score", input.text(), input.has_add_bos(), input.add_bos(), gate_.limits().max_seq_len,
        TokenizeStop{&tokenize_cancelled_, CallDeadline(context_)});
    if (!ids.ok()) {
      FinishWith(ids.status());
      return;
    }
    request_.mutable_tokens()->mutable_ids()->Assign(ids->begin(), ids->end());  // frees the text (oneof)
    Queue();
  }

  // Validates request_ (token ids by now) and submits it to the batcher.
  void Queue() {
    absl::StatusOr<ScoreRequest> engine_request =
        ToEngineRequest(request_, gate_.limits(), gate_.tokenizer());
    if (!engine_request.ok()) {
      FinishWith(engine_request.status());
      return;
    }
    // Held until the call is done: gRPC's copy of the request bytes, the parsed message, the ids (ours and
    // the batcher's) and the response, reserved at its upper bound until it is known.
    held_bytes_ = raw_bytes_ + static_cast<int64_t>(request_.ByteSizeLong()) +
                  static_cast<int64_t>(sizeof(int32_t) * engine_request->tokens.size());
    absl::Status charged =
        Charge(gate_,
               held_bytes_ + static_cast<int64_t>(sizeof(int32_t) * engine_request->tokens.size()) +
                   EstimateScoreResponseBytes(*engine_request),
               "Score", &charge_);
    if (!charged.ok()) {
      FinishWith(charged);
      return;
    }
    engine_request_ = *engine_request;
    absl::StatusOr<uint64_t> ticket;
    bool cancel_now = false;
    {
      // Held across Submit so that the result callback (worker thread) waits until Start is done.
      absl::MutexLock lock(&mu_);
      ticket = gate_.batcher()->Submit(std::move(*engine_request), CallDeadline(context_),
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
    if (cancel_now) gate_.batcher()->Cancel(*ticket);
  }

  void OnResult(absl::StatusOr<ScoreResult> result) {
    { absl::MutexLock lock(&mu_); }  // Start() has returned from Submit
    if (!result.ok()) {
      FinishWith(ExplainCancel(result.status(), CallDeadline(context_)));
      return;
    }
    v1::ScoreResponse response;
    FillScoreResponse(engine_request_, *result, has_text_, request_.request_id(), &response);
    *response_ = Serialize(response);
    charge_.Resize(held_bytes_ + static_cast<int64_t>(response_->Length()));
    FinishWith(absl::OkStatus());
  }

  v1::ScoreRequest request_;  // parsed by Start; a text is replaced by its ids before Queue()
  bool has_text_ = false;     // the request gave text (its ids are echoed)
  std::atomic<bool> tokenize_cancelled_{false};
  ScoreRequest engine_request_;
  int64_t raw_bytes_ = 0;   // gRPC's copy of the request, held until the call is done
  int64_t held_bytes_ = 0;  // the charge besides the response
  absl::Mutex mu_;
  uint64_t ticket_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

// Tokenize: parse and check here, tokenize on the pool, answer from there.
class TokenizeReactor final : public UnaryCall {
 public:
  TokenizeReactor(const ScorerService::Config* config, grpc::CallbackServerContext* context,
                  grpc::ByteBuffer* response)
      : UnaryCall("Tokenize", config, context, response) {}

  void Start(const grpc::ByteBuffer& raw_request) {
    absl::Status status = Admit();
    if (status.ok()) status = ParseRequest(raw_request, &request_, nullptr);
    if (status.ok()) status = gate_.RequireTokenizer();
    if (status.ok()) status = gate_.CheckText(request_.text());
    if (status.ok()) {
      // The request bytes and message, then at most one id per byte of text (+ BOS): 4 bytes in the vector,
      // <= 5 as a packed varint, <= 5 more for its byte length. The tokenizer's working memory is not
      // counted. Held until gRPC deletes the reactor (the response sent).
      const int64_t per_id = 4 + 5 + (request_.want_byte_lengths() ? 5 : 0);
      status = Charge(gate_,
                      static_cast<int64_t>(raw_request.Length() + request_.ByteSizeLong()) +
                          (static_cast<int64_t>(request_.text().size()) + 1) * per_id,
                      "Tokenize", &charge_);
    }
    if (status.ok()) status = gate_.SubmitTokenization([this] { Run(); });
    if (!status.ok()) FinishWith(status);
  }

  void OnCancel() override { cancelled_.store(true); }

 private:
  void Run() {
    absl::StatusOr<std::vector<int32_t>> ids =
        gate_.Tokenize("Tokenize", request_.text(), request_.has_add_bos(), request_.add_bos(),
                       /*max_tokens=*/-1, TokenizeStop{&cancelled_, CallDeadline(context_)});
    if (!ids.ok()) {
      FinishWith(ids.status());
      return;
    }
    v1::TokenizeResponse response;
    response.mutable_ids()->Assign(ids->begin(), ids->end());
    if (request_.want_byte_lengths()) {
      for (int32_t id : *ids) {
        response.add_byte_lengths(static_cast<int32_t>(gate_.tokenizer()->TokenByteLength(id)));
      }
    }
    *response_ = Serialize(response);
    FinishWith(absl::OkStatus());
  }

  v1::TokenizeRequest request_;  // parsed by Start, read by Run (after the pool's queue hand-off)
  std::atomic<bool> cancelled_{false};
};

}  // namespace

grpc::ServerUnaryReactor* StartScore(const ScorerService::Config* config,
                                     grpc::CallbackServerContext* context, const grpc::ByteBuffer& request,
                                     grpc::ByteBuffer* response) {
  auto* reactor = new ScoreReactor(config, context, response);
  reactor->Start(request);
  return reactor;
}

grpc::ServerUnaryReactor* StartTokenize(const ScorerService::Config* config,
                                        grpc::CallbackServerContext* context, const grpc::ByteBuffer& request,
                                        grpc::ByteBuffer* response) {
  auto* reactor = new TokenizeReactor(config, context, response);
  reactor->Start(request);
  return reactor;
}

}  // namespace scored

#include "server/score_stream.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/admission.h"
#include "server/grpc_status.h"
#include "server/request_validation.h"
#include "server/score_call.h"
#include "server/wire_scan.h"

namespace scored {

StreamReactor::StreamReactor(ScorerService* service, grpc::CallbackServerContext* context,
                             ConnectionLimiter::Slot slot)
    : service_(service),
      gate_(*service->config().gate),
      stream_window_(service->config().stream_window),
      context_(context),
      slot_(std::move(slot)) {}

StreamReactor::~StreamReactor() {
  absl::MutexLock lock(&mu_);
  if (paused_) gate_.metrics()->AddPausedStreams(-1);  // not reached: Finish waits for the parked requests
}

void StreamReactor::Begin(bool draining) {
  Actions a;
  {
    absl::MutexLock lock(&mu_);
    draining_ = draining;
    a = DecideLocked();
  }
  Perform(this, a);
}

StreamReactor::Actions StreamReactor::MarkDraining() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
  return DecideLocked();
}

void StreamReactor::Perform(StreamReactor* self, const Actions& a) {
  if (a.write == nullptr && !a.read && !a.finish) return;
  self->Run(a);
}

void StreamReactor::Run(const Actions& a) {
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

void StreamReactor::OnReadDone(bool ok) {
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
  grpc::ByteBuffer raw;
  raw.Swap(&read_buf_);
  const absl::Time start = absl::Now();
  v1::ScoreRequest request;
  uint64_t request_id = 0;  // read from the raw bytes when they do not parse
  const absl::Status parsed = ParseRequest(raw, &request, &request_id);
  if (parsed.ok()) request_id = request.request_id();
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
  } else if (!parsed.ok()) {
    error = parsed;
  } else if (echo) {
    error = gate_.CheckText(request.text().text());  // then tokenized on the pool
  } else {
    engine_request = ToEngineRequest(request, gate_.limits(), gate_.tokenizer());
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
    if (error.ok() && echo) {
      // Counts as pending (the stream cannot finish) until TokenizeThenSubmit has queued or answered it.
      ++pending_;
      auto text_request = std::make_shared<v1::ScoreRequest>(std::move(request));
      error = gate_.SubmitTokenization([this, text_request, request_id, start] {
        TokenizeThenSubmit(text_request.get(), request_id, start);
      });
      if (!error.ok()) --pending_;
    } else if (error.ok()) {
      error = QueueLocked(Parked{std::move(*engine_request), request_id, echo, start});
    }
    if (!error.ok()) EnqueueErrorLocked(request_id, error, start);
    a = DecideLocked();
  }
  Perform(this, a);
}

void StreamReactor::OnWriteDone(bool ok) {
  Actions a;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    responses_.pop_front();  // releases its charge
    if (!ok) {
      write_failed_ = true;
      responses_.clear();
    }
    a = DecideLocked();
  }
  Perform(this, a);
}

void StreamReactor::OnCancel() {
  tokenize_cancelled_.store(true);
  std::vector<uint64_t> tickets;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (!writing_) responses_.clear();  // else OnWriteDone pops the one being written
    tickets.assign(tickets_.begin(), tickets_.end());
  }
  for (uint64_t t : tickets) gate_.batcher()->Cancel(t);
  Actions a;
  {
    absl::MutexLock lock(&mu_);
    a = DecideLocked();
  }
  Perform(this, a);
}

void StreamReactor::OnDone() {
  service_->Unregister(this);
  delete this;
}

absl::Status StreamReactor::QueueLocked(Parked p, bool at_front) {
  if (!at_front && !parked_.empty()) {
    parked_.push_back(std::move(p));
    return absl::OkStatus();
  }
  const int64_t bytes = kQueuedBytesPerToken * static_cast<int64_t>(p.request.tokens.size()) +
                        EstimateScoreResponseBytes(p.request);
  const int64_t headroom = gate_.budget()->limit() / MemoryBudget::kStreamHeadroomDivisor;
  const int64_t share = (gate_.budget()->limit() - headroom) / MemoryBudget::kStreamShareDivisor;
  int64_t own = pending_bytes_;
  for (const Buffered& b : responses_) own += b.charge.bytes();
  absl::StatusOr<MemoryBudget::Charge> charge =
      own > 0 && own + bytes > share
          ? absl::ResourceExhaustedError("this stream holds its share of the memory budget")
          : gate_.TryCharge(bytes, headroom);
  if (!charge.ok()) {
    if (own > 0 || pending_ > 0 || !responses_.empty()) {
      if (at_front) {
        parked_.push_front(std::move(p));
      } else {
        parked_.push_back(std::move(p));
      }
      UpdatePausedLocked();
      return absl::OkStatus();
    }
    gate_.CountBudgetRefusal("ScoreStream");
    return charge.status();
  }
  auto kept = std::make_shared<const ScoreRequest>(p.request);
  auto in_flight = std::make_shared<InFlight>();
  in_flight->charge = std::move(*charge);
  ++pending_;
  pending_bytes_ += bytes;
  // Held across Submit: the result callback needs mu_, so it runs after this step is complete. When Submit
  // fails it destroys the callback, and with it the reservation.
  const uint64_t request_id = p.request_id;
  const bool echo = p.echo;
  const absl::Time start = p.start;
  absl::StatusOr<uint64_t> ticket = gate_.batcher()->Submit(
      std::move(p.request), CallDeadline(context_),
      [this, kept, in_flight, request_id, echo, start](absl::StatusOr<ScoreResult> r) {
        OnResult(*kept, in_flight, request_id, echo, start, std::move(r));
      });
  if (!ticket.ok()) {
    --pending_;
    pending_bytes_ -= bytes;
    return ticket.status();
  }
  in_flight->ticket = *ticket;
  tickets_.insert(*ticket);
  return absl::OkStatus();
}

void StreamReactor::ResolveParkedLocked() {
  while (!parked_.empty()) {
    Parked p = std::move(parked_.front());
    parked_.pop_front();
    const size_t behind = parked_.size();
    const uint64_t request_id = p.request_id;
    const absl::Time start = p.start;
    absl::Status error;
    if (cancelled_ || write_failed_) {
      error = absl::CancelledError("the stream ended before the request was queued");
    } else if (draining_) {
      error = absl::UnavailableError("the server is shutting down");
    } else {
      error = QueueLocked(std::move(p), /*at_front=*/true);
    }
    if (!error.ok()) EnqueueErrorLocked(request_id, error, start);
    if (parked_.size() > behind) break;  // parked again: the budget is still spent
  }
  UpdatePausedLocked();
}

void StreamReactor::UpdatePausedLocked() {
  if (paused_ == parked_.empty()) {
    paused_ = !parked_.empty();
    gate_.metrics()->AddPausedStreams(paused_ ? 1 : -1);
  }
}

void StreamReactor::TokenizeThenSubmit(v1::ScoreRequest* request, uint64_t request_id, absl::Time start) {
  const v1::TextInput& input = request->text();
  absl::StatusOr<std::vector<int32_t>> ids =
      gate_.Tokenize("ScoreStream", input.text(), input.has_add_bos(), input.add_bos(),
                     gate_.limits().max_seq_len, TokenizeStop{&tokenize_cancelled_, CallDeadline(context_)});
  absl::Status error = ids.status();
  absl::StatusOr<ScoreRequest> engine_request;
  if (ids.ok()) {
    request->mutable_tokens()->mutable_ids()->Assign(ids->begin(), ids->end());  // frees the text (oneof)
    engine_request = ToEngineRequest(*request, gate_.limits(), gate_.tokenizer());
    error = engine_request.status();
  }
  Actions a;
  {
    absl::MutexLock lock(&mu_);
    --pending_;
    if (error.ok() && (cancelled_ || write_failed_)) {
      error = absl::CancelledError("the stream ended before the request was queued");
    }
    if (error.ok()) error = QueueLocked(Parked{std::move(*engine_request), request_id, /*echo=*/true, start});
    if (!error.ok()) EnqueueErrorLocked(request_id, error, start);
    a = DecideLocked();
  }
  Perform(this, a);
}

void StreamReactor::OnResult(const ScoreRequest& request, const std::shared_ptr<InFlight>& in_flight,
                             uint64_t request_id, bool echo, absl::Time start,
                             absl::StatusOr<ScoreResult> result) {
  grpc::ByteBuffer response;
  if (result.ok()) {
    v1::ScoreResponse message;
    FillScoreResponse(request, *result, echo, request_id, &message);
    response = Serialize(message);
  }
  Actions a;
  {
    absl::MutexLock lock(&mu_);
    --pending_;
    tickets_.erase(in_flight->ticket);
    // The reservation becomes the response's charge; released here if the response is not kept.
    MemoryBudget::Charge charge = std::move(in_flight->charge);
    pending_bytes_ -= charge.bytes();
    if (result.ok()) {
      gate_.metrics()->RecordRequest("ScoreStream", grpc::StatusCode::OK, SecondsSince(start));
      if (!cancelled_ && !write_failed_) {
        charge.Resize(static_cast<int64_t>(response.Length()));
        responses_.push_back(Buffered{std::move(response), std::move(charge)});
      }
    } else {
      EnqueueErrorLocked(request_id, ExplainCancel(result.status(), CallDeadline(context_)), start);
    }
    a = DecideLocked();
  }
  Perform(this, a);
}

void StreamReactor::EnqueueErrorLocked(uint64_t request_id, const absl::Status& status, absl::Time start) {
  const grpc::StatusCode code = ToGrpcCode(status.code());
  gate_.metrics()->RecordRequest("ScoreStream", code, SecondsSince(start));
  if (cancelled_ || write_failed_) return;
  v1::ScoreResponse response;
  response.set_request_id(request_id);
  response.mutable_error()->set_code(static_cast<int32_t>(code));
  response.mutable_error()->set_message(std::string(status.message()));
  grpc::ByteBuffer bytes = Serialize(response);
  // Owed to the client whatever the budget: a few hundred bytes, at most stream_window per stream.
  MemoryBudget::Charge charge = gate_.budget()->ForceCharge(static_cast<int64_t>(bytes.Length()));
  responses_.push_back(Buffered{std::move(bytes), std::move(charge)});
}

StreamReactor::Actions StreamReactor::DecideLocked() {
  Actions a;
  if (finish_called_) return a;
  ResolveParkedLocked();
  if (!writing_ && !responses_.empty() && !cancelled_ && !write_failed_) {
    writing_ = true;
    a.write = &responses_.front().bytes;  // deque: push_back never moves the front element
  }
  if (!read_in_flight_ && !reads_done_ && !draining_ && !cancelled_ && !write_failed_ && parked_.empty() &&
      pending_ + static_cast<int>(responses_.size()) < stream_window_) {
    read_in_flight_ = true;
    a.read = true;
  }
  if (a.write != nullptr || a.read) {
    ++busy_;
    return a;
  }
  const bool ending = reads_done_ || draining_ || cancelled_ || write_failed_;
  // Unwritten responses of a cancelled or broken stream can never be written: they do not count.
  const bool idle = busy_ == 0 && !writing_ && pending_ == 0 && parked_.empty() &&
                    (responses_.empty() || cancelled_ || write_failed_);
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

}  // namespace scored

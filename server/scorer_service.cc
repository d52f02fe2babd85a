#include "server/scorer_service.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/logging.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/message.h"
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

// What a walk over a message's wire bytes found; used only once the real parse has failed, to say why.
struct WireScan {
  std::string problem;  // the first problem found; empty: none found
  bool has_request_id = false;
  uint64_t request_id = 0;  // top-level field `request_id` (a varint), when it could be read
};

// The offset of the first byte of `s` that does not start a UTF-8 sequence as protobuf requires of a
// proto3 string (no overlong forms, no surrogates, nothing past U+10FFFF); npos when `s` is valid.
size_t FirstInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<unsigned char>(s[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0;
    uint32_t min_cp = 0;
    if ((lead & 0xE0) == 0xC0) {
      len = 2, cp = lead & 0x1F, min_cp = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
      len = 3, cp = lead & 0x0F, min_cp = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
      len = 4, cp = lead & 0x07, min_cp = 0x10000;
    } else {
      return i;
    }
    if (i + len > s.size()) return i;
    for (size_t k = 1; k < len; ++k) {
      const auto next = static_cast<unsigned char>(s[i + k]);
      if ((next & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (next & 0x3F);
    }
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

// Nested messages deeper than this are not looked into (the request messages nest two levels).
constexpr int kMaxScanDepth = 8;

// Walks `bytes` as a `type` message by the wire format alone, looking into nested message fields and
// checking the UTF-8 of every string field (protobuf's parser refuses a proto3 string that is not UTF-8
// but does not say which). `path` prefixes field names ("text." for ScoreRequest.text). Stops at the first
// bytes the wire format cannot explain (a truncated field, a bad tag or wire type).
void ScanWire(std::string_view bytes, const google::protobuf::Descriptor& type, const std::string& path,
              int depth, WireScan* scan) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  const auto note = [scan](std::string problem) {
    if (scan->problem.empty()) scan->problem = std::move(problem);
  };
  while (in.CurrentPosition() < static_cast<int>(bytes.size())) {
    const int at = in.CurrentPosition();
    const uint32_t tag = in.ReadTag();  // 0 on a malformed or truncated tag
    const int number = static_cast<int>(tag >> 3);
    const uint32_t wire_type = tag & 7;
    const google::protobuf::FieldDescriptor* field = number > 0 ? type.FindFieldByNumber(number) : nullptr;
    const std::string name = field != nullptr ? path + field->name() : absl::StrCat(path, "#", number);
    bool ok = number > 0;
    if (ok && wire_type == 0) {  // varint
      uint64_t value = 0;
      ok = in.ReadVarint64(&value);
      if (ok && depth == 0 && field != nullptr && field->name() == "request_id") {
        scan->has_request_id = true;
        scan->request_id = value;
      }
    } else if (ok && wire_type == 1) {  // fixed64
      ok = in.Skip(8);
    } else if (ok && wire_type == 5) {  // fixed32
      ok = in.Skip(4);
    } else if (ok && wire_type == 2) {  // length-delimited: string, bytes, message or packed
      uint32_t length = 0;
      ok = in.ReadVarint32(&length) &&
           static_cast<uint64_t>(in.CurrentPosition()) + length <= static_cast<uint64_t>(bytes.size());
      if (ok) {
        const std::string_view value = bytes.substr(static_cast<size_t>(in.CurrentPosition()), length);
        ok = in.Skip(static_cast<int>(length));
        if (field != nullptr && field->type() == google::protobuf::FieldDescriptor::TYPE_STRING) {
          const size_t bad = FirstInvalidUtf8(value);
          if (bad != std::string_view::npos) {
            note(absl::StrCat("invalid UTF-8 in field ", name, " (at byte ", bad, " of the string)"));
          }
        } else if (field != nullptr && field->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE &&
                   depth < kMaxScanDepth) {
          ScanWire(value, *field->message_type(), name + ".", depth + 1, scan);
        }
      }
    } else {
      ok = false;  // groups (3, 4) are not used by proto3; 6 and 7 do not exist
    }
    if (!ok) {
      note(absl::StrCat("truncated or malformed protobuf at byte ", at,
                        path.empty() ? "" : absl::StrCat(" of field ", path.substr(0, path.size() - 1)),
                        " (field ", name, ")"));
      return;
    }
  }
}

// Parses the received bytes as `message`. INVALID_ARGUMENT naming the problem when they do not parse;
// `request_id` (may be null) then receives the message's field request_id if it could be read.
absl::Status ParseRequest(const grpc::ByteBuffer& buffer, google::protobuf::Message* message,
                          uint64_t* request_id) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (buffer.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices)
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  if (message->ParseFromString(bytes)) return absl::OkStatus();
  WireScan scan;
  ScanWire(bytes, *message->GetDescriptor(), "", 0, &scan);
  if (request_id != nullptr && scan.has_request_id) *request_id = scan.request_id;
  const std::string& type = message->GetDescriptor()->name();
  return absl::InvalidArgumentError(
      absl::StrCat("request is not a valid ", type, ": ",
                   scan.problem.empty() ? absl::StrCat("the bytes do not parse as a ", type) : scan.problem));
}

// Serializes a response for a raw-bytes method.
grpc::ByteBuffer Serialize(const google::protobuf::Message& message) {
  grpc::ByteBuffer buffer;
  bool own_buffer = false;
  // Cannot fail for a message built in memory (only a size over 2 GiB could, far past any reply here).
  grpc::SerializationTraits<google::protobuf::Message>::Serialize(message, &buffer, &own_buffer)
      .IgnoreError();
  return buffer;
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

// The server-wide limits (server/memory_budget.h). A refusal is RESOURCE_EXHAUSTED naming the flag, counted
// in scored_limit_rejections_total{limit, method}.
absl::Status TakeConnectionSlot(const ScorerService::Config& config,
                                const grpc::CallbackServerContext& context, const char* method,
                                ConnectionLimiter::Slot* slot) {
  absl::StatusOr<ConnectionLimiter::Slot> taken = config.connections->Acquire(context.peer());
  if (!taken.ok()) {
    config.metrics->RecordLimitRejection("max_connections", method);
    return taken.status();
  }
  *slot = std::move(*taken);
  return absl::OkStatus();
}

absl::Status ChargeBudget(const ScorerService::Config& config, int64_t bytes, int64_t headroom,
                          const char* method, MemoryBudget::Charge* charge) {
  absl::StatusOr<MemoryBudget::Charge> taken = config.budget->TryCharge(bytes, headroom);
  if (!taken.ok()) {
    config.metrics->RecordLimitRejection("max_buffered_bytes", method);
    return taken.status();
  }
  *charge = std::move(*taken);
  return absl::OkStatus();
}

// Texts from this size on are logged when their tokenization starts and when it stops part-way (smaller
// ones only count in the metric: they are frequent and cheap).
constexpr size_t kLogTextBytes = size_t{1} << 20;

// The checks of a `text` input before any tokenization work: a tokenizer exists, the text fits
// --max_text_bytes.
absl::Status CheckText(const ScorerService::Config& config, const std::string& text) {
  if (config.tokenizer == nullptr) {
    return absl::FailedPreconditionError(
        "`text` input needs a tokenizer, and the model folder has none; send `tokens`");
  }
  if (static_cast<int64_t>(text.size()) > config.max_text_bytes) {
    return absl::OutOfRangeError(absl::StrCat("text of ", text.size(),
                                              " bytes is longer than --max_text_bytes (",
                                              config.max_text_bytes, " bytes)"));
  }
  return absl::OkStatus();
}

// What stops a call's tokenization part-way.
struct TokenizeStop {
  const std::atomic<bool>* cancelled = nullptr;  // set by the call's OnCancel
  absl::Time deadline = absl::InfiniteFuture();  // the call's deadline
};

// Tokenizes a call's text (on a pool thread) with the BOS policy of TokenizeWithBos, under `max_tokens`
// (< 0: none; counts the BOS) and `stop`, polled between words. A stop becomes the call's status
// (OUT_OF_RANGE past max_seq_len, CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE at the end of the shutdown grace)
// and counts in scored_tokenizations_stopped_total.
absl::StatusOr<std::vector<int32_t>> TokenizeCallText(const ScorerService::Config& config, const char* method,
                                                      const std::string& text, bool has_add_bos, bool add_bos,
                                                      int64_t max_tokens, const TokenizeStop& stop) {
  const bool large = text.size() >= kLogTextBytes;
  if (large) {
    SCORED_LOG(INFO) << method << ": tokenizing " << text.size() << " bytes of text";
  }
  const TokenizePool* pool = config.tokenize_pool;
  EncodeLimits limits;
  limits.max_tokens = max_tokens;
  limits.stop = [&stop, pool] {
    return stop.cancelled->load(std::memory_order_relaxed) || pool->stopping() ||
           absl::Now() >= stop.deadline;
  };
  absl::StatusOr<std::vector<int32_t>> ids =
      TokenizeWithBos(*config.tokenizer, text, has_add_bos, add_bos, std::move(limits));
  if (ids.ok()) return ids;
  const absl::Status& status = ids.status();
  absl::Status stopped;
  std::string reason;
  if (status.code() == absl::StatusCode::kOutOfRange && max_tokens >= 0) {
    reason = "max_seq_len";
    stopped =
        absl::OutOfRangeError(absl::StrCat("sequence has more than ", max_tokens, " tokens; max_seq_len is ",
                                           max_tokens, " (the text was tokenized no further)"));
  } else if (status.code() == absl::StatusCode::kCancelled) {
    if (pool->stopping()) {
      reason = "shutdown";
      stopped = absl::UnavailableError(absl::StrCat(
          "the server is shutting down: the text's tokenization was stopped (", status.message(), ")"));
    } else if (stop.cancelled->load() && absl::Now() + kDeadlineSlack < stop.deadline) {
      reason = "cancelled";
      stopped = absl::CancelledError(absl::StrCat(
          "the call was cancelled: its text's tokenization was stopped (", status.message(), ")"));
    } else {  // the deadline passed (a cancellation this close to it is the client's deadline timer)
      reason = "deadline";
      stopped = absl::DeadlineExceededError(
          absl::StrCat("the deadline passed while the text was tokenized (", status.message(), ")"));
    }
  } else {
    return status;
  }
  config.metrics->RecordTokenizationStopped(reason);
  if (large) {
    SCORED_LOG(INFO) << method << ": tokenization of " << text.size() << " bytes stopped (" << reason
                     << "): " << stopped.message();
  }
  return stopped;
}

// A ScoreStream refused before its first read (no token, failed engine): finishes at once.
class RejectedStreamReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit RejectedStreamReactor(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

// Unary Score: parse, validate, queue, answer from the batcher's callback.
class ScoreReactor final : public grpc::ServerUnaryReactor {
 public:
  ScoreReactor(const ScorerService::Config* config, grpc::CallbackServerContext* context,
               grpc::ByteBuffer* response)
      : config_(config), context_(context), response_(response) {}

  void Start(const grpc::ByteBuffer& raw_request) {
    absl::Status admitted = Admit(*config_, *context_);
    if (admitted.ok()) admitted = TakeConnectionSlot(*config_, *context_, "Score", &slot_);
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
    absl::Status queued = CheckText(*config_, request_.text().text());
    if (queued.ok()) queued = config_->tokenize_pool->Submit([this] { TokenizeThenQueue(); });
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
    if (ticket != 0) config_->batcher->Cancel(ticket);
  }

  void OnDone() override { delete this; }

 private:
  // On a pool thread: the text becomes the request's token ids (stopping past max_seq_len), then Queue().
  void TokenizeThenQueue() {
    const v1::TextInput& input = request_.text();
    absl::StatusOr<std::vector<int32_t>> ids = TokenizeCallText(
        *config_, "Score", input.text(), input.has_add_bos(), input.add_bos(), config_->limits.max_seq_len,
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
        ToEngineRequest(request_, config_->limits, config_->tokenizer);
    if (!engine_request.ok()) {
      FinishWith(engine_request.status());
      return;
    }
    // Held until the call is done: gRPC's copy of the request bytes, the parsed message, the ids (ours and
    // the batcher's) and the response, reserved at its upper bound until it is known.
    held_bytes_ = raw_bytes_ + static_cast<int64_t>(request_.ByteSizeLong()) +
                  static_cast<int64_t>(sizeof(int32_t) * engine_request->tokens.size());
    absl::Status charged =
        ChargeBudget(*config_,
                     held_bytes_ + static_cast<int64_t>(sizeof(int32_t) * engine_request->tokens.size()) +
                         EstimateScoreResponseBytes(*engine_request),
                     0, "Score", &charge_);
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

  void FinishWith(const absl::Status& status) {
    const grpc::Status g = ToGrpcStatus(status);
    config_->metrics->RecordRequest("Score", g.error_code(), SecondsSince(start_));
    Finish(g);
  }

  const ScorerService::Config* const config_;
  grpc::CallbackServerContext* const context_;
  v1::ScoreRequest request_;  // parsed by Start; a text is replaced by its ids before Queue()
  bool has_text_ = false;     // the request gave text (its ids are echoed)
  std::atomic<bool> tokenize_cancelled_{false};
  grpc::ByteBuffer* const response_;
  const absl::Time start_ = absl::Now();
  ScoreRequest engine_request_;
  // Taken by Start, released when gRPC deletes the reactor (after the response was sent).
  ConnectionLimiter::Slot slot_;
  MemoryBudget::Charge charge_;
  int64_t raw_bytes_ = 0;   // gRPC's copy of the request, held until the call is done
  int64_t held_bytes_ = 0;  // the charge besides the response
  absl::Mutex mu_;
  uint64_t ticket_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

// Tokenize: parse and check here, tokenize on the pool, answer from there.
class TokenizeReactor final : public grpc::ServerUnaryReactor {
 public:
  TokenizeReactor(const ScorerService::Config* config, grpc::CallbackServerContext* context,
                  grpc::ByteBuffer* response)
      : config_(config), context_(context), response_(response) {}

  void Start(const grpc::ByteBuffer& raw_request) {
    absl::Status status = Admit(*config_, *context_);
    if (status.ok()) status = TakeConnectionSlot(*config_, *context_, "Tokenize", &slot_);
    if (status.ok()) status = ParseRequest(raw_request, &request_, nullptr);
    if (status.ok() && config_->tokenizer == nullptr) {
      status = absl::FailedPreconditionError("the model folder has no tokenizer");
    }
    if (status.ok()) status = CheckText(*config_, request_.text());
    if (status.ok()) {
      // The request bytes and message, then at most one id per byte of text (+ BOS): 4 bytes in the vector,
      // <= 5 as a packed varint, <= 5 more for its byte length. The tokenizer's working memory is not
      // counted. Held until gRPC deletes the reactor (the response sent).
      const int64_t per_id = 4 + 5 + (request_.want_byte_lengths() ? 5 : 0);
      status = ChargeBudget(*config_,
                            static_cast<int64_t>(raw_request.Length() + request_.ByteSizeLong()) +
                                (static_cast<int64_t>(request_.text().size()) + 1) * per_id,
                            0, "Tokenize", &charge_);
    }
    if (status.ok()) status = config_->tokenize_pool->Submit([this] { Run(); });
    if (!status.ok()) FinishWith(status);
  }

  void OnCancel() override { cancelled_.store(true); }
  void OnDone() override { delete this; }

 private:
  void Run() {
    absl::StatusOr<std::vector<int32_t>> ids =
        TokenizeCallText(*config_, "Tokenize", request_.text(), request_.has_add_bos(), request_.add_bos(),
                         /*max_tokens=*/-1, TokenizeStop{&cancelled_, CallDeadline(context_)});
    if (!ids.ok()) {
      FinishWith(ids.status());
      return;
    }
    v1::TokenizeResponse response;
    response.mutable_ids()->Assign(ids->begin(), ids->end());
    if (request_.want_byte_lengths()) {
      for (int32_t id : *ids) {
        response.add_byte_lengths(static_cast<int32_t>(config_->tokenizer->TokenByteLength(id)));
      }
    }
    *response_ = Serialize(response);
    FinishWith(absl::OkStatus());
  }

  void FinishWith(const absl::Status& status) {
    const grpc::Status g = ToGrpcStatus(status);
    config_->metrics->RecordRequest("Tokenize", g.error_code(), SecondsSince(start_));
    Finish(g);
  }

  const ScorerService::Config* const config_;
  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer* const response_;
  const absl::Time start_ = absl::Now();
  v1::TokenizeRequest request_;  // parsed by Start, read by Run (after the pool's queue hand-off)
  std::atomic<bool> cancelled_{false};
  ConnectionLimiter::Slot slot_;  // taken by Start, released when gRPC deletes the reactor
  MemoryBudget::Charge charge_;   // likewise
};

}  // namespace

// Bidi ScoreStream. All state changes happen under mu_ in one step that also decides the next gRPC
// operations (Actions); the operations run after the lock is released. `busy_` counts operations
// decided but not yet started, and Finish is only decided when nothing is busy, pending, being
// written or (unless the stream is ending) being read, so `this` stays alive while a thread holds an
// operation to run; a thread left with nothing to run must not touch it again (Perform).
//
// Messages travel as bytes: each read is parsed here (one that does not parse is answered with an error
// response, not taken as the end of the stream) and each response is serialized when it is queued.
class StreamReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamReactor(ScorerService* service, grpc::CallbackServerContext* context, ConnectionLimiter::Slot slot)
      : service_(service), config_(&service->config()), context_(context), slot_(std::move(slot)) {}

  ~StreamReactor() override {
    absl::MutexLock lock(&mu_);
    if (paused_) config_->metrics->AddPausedStreams(-1);  // not reached: Finish waits for the parked requests
  }

  struct Actions {
    const grpc::ByteBuffer* write = nullptr;
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
      error = CheckText(*config_, request.text().text());  // then tokenized on the pool
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
      if (error.ok() && echo) {
        // Counts as pending (the stream cannot finish) until TokenizeThenSubmit has queued or answered it.
        ++pending_;
        auto text_request = std::make_shared<v1::ScoreRequest>(std::move(request));
        error = config_->tokenize_pool->Submit([this, text_request, request_id, start] {
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

  void OnWriteDone(bool ok) override {
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

  void OnCancel() override {
    tokenize_cancelled_.store(true);
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
  // A serialized ScoreResponse and its charge to the memory budget, released once it is written.
  struct Buffered {
    grpc::ByteBuffer bytes;
    MemoryBudget::Charge charge;
  };
  // A validated request not yet queued: one that waits for the budget (parked_) or is being queued.
  struct Parked {
    ScoreRequest request;
    uint64_t request_id;
    bool echo;  // the request gave text: echo its token ids
    absl::Time start;
  };
  // A queued request: its ticket (written by QueueLocked under mu_ before OnResult can take mu_) and its
  // reservation, which OnResult turns into the response's charge.
  struct InFlight {
    uint64_t ticket = 0;
    MemoryBudget::Charge charge;
  };

  // Charges `p` to the memory budget (its ids and the bound of its response; streams may fill the budget up
  // to its last 1/kStreamHeadroomDivisor, one stream to 1/kStreamShareDivisor of that unless it holds
  // nothing) and queues it. When the budget or the stream's share is spent and this stream has
  // responses of its own in flight or unwritten, `p` is parked instead: the stream stops reading and
  // DecideLocked retries it after each of its own events (a result, a write), which free memory. With none
  // (nothing of its own would ever free memory for it), the budget's RESOURCE_EXHAUSTED is returned, to be
  // answered as an `error` response. Any other error of Batcher::Submit is returned too.
  // Requests park in order: one arriving while others are parked (a text whose tokenization finished, a read
  // completing) joins the end of the line; ResolveParkedLocked passes at_front for the head of the line.
  absl::Status QueueLocked(Parked p, bool at_front = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!at_front && !parked_.empty()) {
      parked_.push_back(std::move(p));
      return absl::OkStatus();
    }
    const int64_t bytes = kQueuedBytesPerToken * static_cast<int64_t>(p.request.tokens.size()) +
                          EstimateScoreResponseBytes(p.request);
    const int64_t headroom = config_->budget->limit() / MemoryBudget::kStreamHeadroomDivisor;
    const int64_t share = (config_->budget->limit() - headroom) / MemoryBudget::kStreamShareDivisor;
    int64_t own = pending_bytes_;
    for (const Buffered& b : responses_) own += b.charge.bytes();
    absl::StatusOr<MemoryBudget::Charge> charge =
        own > 0 && own + bytes > share
            ? absl::ResourceExhaustedError("this stream holds its share of the memory budget")
            : config_->budget->TryCharge(bytes, headroom);
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
      config_->metrics->RecordLimitRejection("max_buffered_bytes", "ScoreStream");
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
    absl::StatusOr<uint64_t> ticket = config_->batcher->Submit(
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

  // The parked request, if any: answered (cancelled or shutting down) or queued again (see QueueLocked).
  void ResolveParkedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
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

  // scored_streams_paused counts this stream while it has parked requests.
  void UpdatePausedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (paused_ == parked_.empty()) {
      paused_ = !parked_.empty();
      config_->metrics->AddPausedStreams(paused_ ? 1 : -1);
    }
  }

  // On a pool thread: tokenizes a text request (stopping past max_seq_len), then submits its ids or
  // answers its error. OnReadDone counted it in pending_, which keeps the reactor alive until here.
  void TokenizeThenSubmit(v1::ScoreRequest* request, uint64_t request_id, absl::Time start) {
    const v1::TextInput& input = request->text();
    absl::StatusOr<std::vector<int32_t>> ids = TokenizeCallText(
        *config_, "ScoreStream", input.text(), input.has_add_bos(), input.add_bos(),
        config_->limits.max_seq_len, TokenizeStop{&tokenize_cancelled_, CallDeadline(context_)});
    absl::Status error = ids.status();
    absl::StatusOr<ScoreRequest> engine_request;
    if (ids.ok()) {
      request->mutable_tokens()->mutable_ids()->Assign(ids->begin(), ids->end());  // frees the text (oneof)
      engine_request = ToEngineRequest(*request, config_->limits, config_->tokenizer);
      error = engine_request.status();
    }
    Actions a;
    {
      absl::MutexLock lock(&mu_);
      --pending_;
      if (error.ok() && (cancelled_ || write_failed_)) {
        error = absl::CancelledError("the stream ended before the request was queued");
      }
      if (error.ok())
        error = QueueLocked(Parked{std::move(*engine_request), request_id, /*echo=*/true, start});
      if (!error.ok()) EnqueueErrorLocked(request_id, error, start);
      a = DecideLocked();
    }
    Perform(this, a);
  }

  void OnResult(const ScoreRequest& request, const std::shared_ptr<InFlight>& in_flight, uint64_t request_id,
                bool echo, absl::Time start, absl::StatusOr<ScoreResult> result) {
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
        config_->metrics->RecordRequest("ScoreStream", grpc::StatusCode::OK, SecondsSince(start));
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

  void EnqueueErrorLocked(uint64_t request_id, const absl::Status& status, absl::Time start)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const grpc::StatusCode code = ToGrpcCode(status.code());
    config_->metrics->RecordRequest("ScoreStream", code, SecondsSince(start));
    if (cancelled_ || write_failed_) return;
    v1::ScoreResponse response;
    response.set_request_id(request_id);
    response.mutable_error()->set_code(static_cast<int32_t>(code));
    response.mutable_error()->set_message(std::string(status.message()));
    grpc::ByteBuffer bytes = Serialize(response);
    // Owed to the client whatever the budget: a few hundred bytes, at most stream_window per stream.
    MemoryBudget::Charge charge = config_->budget->ForceCharge(static_cast<int64_t>(bytes.Length()));
    responses_.push_back(Buffered{std::move(bytes), std::move(charge)});
  }

  Actions DecideLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Actions a;
    if (finish_called_) return a;
    ResolveParkedLocked();
    if (!writing_ && !responses_.empty() && !cancelled_ && !write_failed_) {
      writing_ = true;
      a.write = &responses_.front().bytes;  // deque: push_back never moves the front element
    }
    if (!read_in_flight_ && !reads_done_ && !draining_ && !cancelled_ && !write_failed_ && parked_.empty() &&
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

  ScorerService* const service_;
  const ScorerService::Config* const config_;
  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer read_buf_;           // owned by the read in flight
  const ConnectionLimiter::Slot slot_;  // this call's connection slot, released when gRPC deletes the reactor
  std::atomic<bool> tokenize_cancelled_{false};  // set by OnCancel, polled by running tokenizations

  absl::Mutex mu_;
  // Serialized ScoreResponses; the front is being written if writing_.
  std::deque<Buffered> responses_ ABSL_GUARDED_BY(mu_);
  // Requests that wait for the budget, in order (no read is started while any does; see QueueLocked): the one
  // read while it was spent, and texts whose tokenization finished meanwhile.
  std::deque<Parked> parked_ ABSL_GUARDED_BY(mu_);
  bool paused_ ABSL_GUARDED_BY(mu_) = false;  // counted in scored_streams_paused
  std::set<uint64_t> tickets_ ABSL_GUARDED_BY(mu_);
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // the reservations of the pending_ requests
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
                                               const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  auto* reactor = new ScoreReactor(&config_, context, response);
  reactor->Start(*request);
  return reactor;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ScorerService::ScoreStream(
    grpc::CallbackServerContext* context) {
  absl::Status admitted = Admit(config_, *context);
  if (!admitted.ok()) {
    const grpc::Status g = ToGrpcStatus(admitted);
    config_.metrics->RecordRequest("ScoreStream", g.error_code(), 0.0);
    return new RejectedStreamReactor(g);
  }
  ConnectionLimiter::Slot slot;
  admitted = TakeConnectionSlot(config_, *context, "ScoreStream", &slot);
  if (!admitted.ok()) {
    const grpc::Status g = ToGrpcStatus(admitted);
    config_.metrics->RecordRequest("ScoreStream", g.error_code(), 0.0);
    return new RejectedStreamReactor(g);
  }
  auto* reactor = new StreamReactor(this, context, std::move(slot));
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
  auto* reactor = new TokenizeReactor(&config_, context, raw_response);
  reactor->Start(*raw_request);
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

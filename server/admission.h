// The one way in to scoring: every Scorer gRPC call (Score, ScoreStream, Tokenize, GetModelInfo) and every
// OpenAI HTTP route (server/openai_http.h) passes the same ScoreGate, so both transports refuse the same
// requests with the same words and count each refusal in the same metric, once.
//
//   Admit       the bearer token of --auth_token_file (when set), then the engine's health:
//               UNAUTHENTICATED (BearerTokenAuth's wording), UNAVAILABLE "the engine failed and cannot serve:
//               <why>" once the batcher holds a fatal status.
//   TakeSlot    a --max_connections slot for the call's peer; RESOURCE_EXHAUSTED naming the flag, counted in
//               scored_limit_rejections_total{limit="max_connections", method}.
//   CheckText   a `text` input before any tokenization work: FAILED_PRECONDITION without a tokenizer,
//               OUT_OF_RANGE over --max_text_bytes.
//   Tokenize    text -> ids under a token bound and a stop condition; a stop becomes OUT_OF_RANGE
//               (max_seq_len), CANCELLED, DEADLINE_EXCEEDED or UNAVAILABLE (shutdown) and counts in
//               scored_tokenizations_stopped_total{reason}. Runs on the TokenizePool (Submit), or waits for
//               it (TokenizeAndWait, for the blocking HTTP handlers).
//   Charge      the memory budget (--max_buffered_bytes); RESOURCE_EXHAUSTED, counted in
//               scored_limit_rejections_total{limit="max_buffered_bytes", method}.
//
// `method` names the caller in metrics and logs: the gRPC method ("Score", "ScoreStream", "Tokenize") or
// "OpenAI/<route>". Thread-safety: immutable after construction; every method is safe from any thread. The
// objects in Config are not owned and must outlive the gate and every Slot / Charge taken from it.
#ifndef SCORED_SERVER_ADMISSION_H_
#define SCORED_SERVER_ADMISSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/score_contract.h"
#include "engine/tokenizer/tokenizer.h"
#include "grpcpp/server_context.h"
#include "server/batcher.h"
#include "server/memory_budget.h"
#include "server/metrics.h"
#include "server/security.h"
#include "server/tokenize_pool.h"

namespace scored {

// A call whose deadline passes is cancelled; it is reported as DEADLINE_EXCEEDED, not CANCELLED. The
// server's deadline comes from the grpc-timeout header, so it lies slightly after the client's, whose own
// timer usually fires first and cancels the call: a cancellation within kDeadlineSlack of the deadline is
// that timer.
constexpr absl::Duration kDeadlineSlack = absl::Milliseconds(100);

// What stops a call's tokenization part-way (besides the pool's shutdown, always polled).
struct TokenizeStop {
  const std::atomic<bool>* cancelled = nullptr;  // set by the call's OnCancel; null: never
  absl::Time deadline = absl::InfiniteFuture();  // the call's deadline
};

class ScoreGate {
 public:
  struct Config {
    Batcher* batcher = nullptr;                 // required: its fatal_status() is the engine's health
    const Tokenizer* tokenizer = nullptr;       // null when the model has no tokenizer
    Metrics* metrics = nullptr;                 // required
    const BearerTokenAuth* auth = nullptr;      // null = no token needed
    MemoryBudget* budget = nullptr;             // required (--max_buffered_bytes)
    ConnectionLimiter* connections = nullptr;   // required (--max_connections)
    TokenizePool* tokenize_pool = nullptr;      // required when `tokenizer` is set
    int64_t max_text_bytes = int64_t{4} << 20;  // --max_text_bytes
    ScoreLimits limits;                         // the engine's limits (max_seq_len names them in errors)
  };

  explicit ScoreGate(Config config) : config_(std::move(config)) {}
  ScoreGate(const ScoreGate&) = delete;
  ScoreGate& operator=(const ScoreGate&) = delete;

  // The token carried as gRPC metadata `authorization`, then the engine's health.
  absl::Status Admit(const grpc::CallbackServerContext& context) const;
  // The same for a header value (HTTP `Authorization`); `has_authorization` false = no such header.
  absl::Status Admit(bool has_authorization, absl::string_view authorization) const;
  // The engine's health alone: routes served without the token (the HTTP tokenizer routes by default).
  absl::Status AdmitWithoutToken() const { return CheckHealth(); }

  // A call of `peer` (gRPC's peer string, or "http:ADDR:PORT") begins; held until the Slot is destroyed.
  absl::StatusOr<ConnectionLimiter::Slot> TakeSlot(const std::string& peer, absl::string_view method) const;

  // FAILED_PRECONDITION "the model folder has no tokenizer" when there is none (Tokenize requests).
  absl::Status RequireTokenizer() const;
  // A `text` input's checks before any tokenization work: a tokenizer exists, the text fits --max_text_bytes.
  absl::Status CheckText(const std::string& text) const;

  // Queues `job` (a tokenization) on the TokenizePool: RESOURCE_EXHAUSTED naming --tokenize_queue when its
  // queue is full, UNAVAILABLE once it shuts down.
  absl::Status SubmitTokenization(std::function<void()> job) const;
  // Tokenizes `text` on the calling thread (a pool thread) with TokenizeWithBos's BOS policy, under
  // `max_tokens` ids (< 0: none; counts the BOS) and `stop`, polled between words. Texts of 1 MiB and more
  // are logged when they start and when they stop part-way. CheckText must have passed.
  absl::StatusOr<std::vector<int32_t>> Tokenize(absl::string_view method, const std::string& text,
                                                bool has_add_bos, bool add_bos, int64_t max_tokens,
                                                const TokenizeStop& stop) const;
  // CheckText, then Tokenize on the pool (no cancellation, no deadline), waiting for its end.
  absl::StatusOr<std::vector<int32_t>> TokenizeAndWait(absl::string_view method, const std::string& text,
                                                       bool has_add_bos, bool add_bos,
                                                       int64_t max_tokens) const;

  // Charges `bytes` to the memory budget, keeping `headroom` of it for others (MemoryBudget::TryCharge).
  absl::StatusOr<MemoryBudget::Charge> Charge(int64_t bytes, absl::string_view method,
                                              int64_t headroom = 0) const;
  // A charge the caller may retry later instead of refusing (a ScoreStream parks the request): not counted.
  // When the caller does refuse, it counts that once with CountBudgetRefusal.
  absl::StatusOr<MemoryBudget::Charge> TryCharge(int64_t bytes, int64_t headroom) const;
  void CountBudgetRefusal(absl::string_view method) const;

  Batcher* batcher() const { return config_.batcher; }
  const Tokenizer* tokenizer() const { return config_.tokenizer; }
  Metrics* metrics() const { return config_.metrics; }
  MemoryBudget* budget() const { return config_.budget; }
  const ScoreLimits& limits() const { return config_.limits; }

 private:
  absl::Status CheckHealth() const;

  const Config config_;
};

}  // namespace scored

#endif  // SCORED_SERVER_ADMISSION_H_

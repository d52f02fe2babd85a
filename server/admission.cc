#include "server/admission.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "engine/base/logging.h"
#include "server/request_validation.h"

namespace scored {
namespace {

// Texts from this size on are logged when their tokenization starts and when it stops part-way (smaller
// ones only count in the metric: they are frequent and cheap).
constexpr size_t kLogTextBytes = size_t{1} << 20;

}  // namespace

absl::Status ScoreGate::CheckHealth() const {
  const absl::Status fatal = config_.batcher->fatal_status();
  if (!fatal.ok()) {
    return absl::UnavailableError(absl::StrCat("the engine failed and cannot serve: ", fatal.message()));
  }
  return absl::OkStatus();
}

absl::Status ScoreGate::Admit(const grpc::CallbackServerContext& context) const {
  if (config_.auth != nullptr) {
    absl::Status authenticated = config_.auth->Check(context);
    if (!authenticated.ok()) return authenticated;
  }
  return CheckHealth();
}

absl::Status ScoreGate::Admit(bool has_authorization, absl::string_view authorization) const {
  if (config_.auth != nullptr) {
    absl::Status authenticated = config_.auth->CheckHeader(has_authorization, authorization);
    if (!authenticated.ok()) return authenticated;
  }
  return CheckHealth();
}

absl::StatusOr<ConnectionLimiter::Slot> ScoreGate::TakeSlot(const std::string& peer,
                                                            absl::string_view method) const {
  absl::StatusOr<ConnectionLimiter::Slot> taken = config_.connections->Acquire(peer);
  if (!taken.ok()) config_.metrics->RecordLimitRejection("max_connections", std::string(method));
  return taken;
}

absl::Status ScoreGate::RequireTokenizer() const {
  if (config_.tokenizer == nullptr) return absl::FailedPreconditionError("the model folder has no tokenizer");
  return absl::OkStatus();
}

absl::Status ScoreGate::CheckText(const std::string& text) const {
  if (config_.tokenizer == nullptr) {
    return absl::FailedPreconditionError(
        "`text` input needs a tokenizer, and the model folder has none; send `tokens`");
  }
  if (static_cast<int64_t>(text.size()) > config_.max_text_bytes) {
    return absl::OutOfRangeError(absl::StrCat("text of ", text.size(),
                                              " bytes is longer than --max_text_bytes (",
                                              config_.max_text_bytes, " bytes)"));
  }
  return absl::OkStatus();
}

absl::Status ScoreGate::SubmitTokenization(std::function<void()> job) const {
  return config_.tokenize_pool->Submit(std::move(job));
}

absl::StatusOr<std::vector<int32_t>> ScoreGate::Tokenize(absl::string_view method, const std::string& text,
                                                         bool has_add_bos, bool add_bos, int64_t max_tokens,
                                                         const TokenizeStop& stop) const {
  const bool large = text.size() >= kLogTextBytes;
  if (large) {
    SCORED_LOG(INFO) << method << ": tokenizing " << text.size() << " bytes of text";
  }
  const TokenizePool* pool = config_.tokenize_pool;
  const auto cancelled = [&stop] { return stop.cancelled != nullptr && stop.cancelled->load(); };
  EncodeLimits limits;
  limits.max_tokens = max_tokens;
  limits.stop = [&stop, pool] {
    return (stop.cancelled != nullptr && stop.cancelled->load(std::memory_order_relaxed)) ||
           pool->stopping() || absl::Now() >= stop.deadline;
  };
  absl::StatusOr<std::vector<int32_t>> ids =
      TokenizeWithBos(*config_.tokenizer, text, has_add_bos, add_bos, std::move(limits));
  if (ids.ok()) return ids;
  const absl::Status& status = ids.status();
  absl::Status stopped;
  std::string reason;
  if (status.code() == absl::StatusCode::kOutOfRange && max_tokens >= 0) {
    reason = "max_seq_len";
    stopped = absl::OutOfRangeError(absl::StrCat("sequence has more than ", max_tokens,
                                                 " tokens; max_seq_len is ", config_.limits.max_seq_len,
                                                 " (the text was tokenized no further)"));
  } else if (status.code() == absl::StatusCode::kCancelled) {
    if (pool->stopping()) {
      reason = "shutdown";
      stopped = absl::UnavailableError(absl::StrCat(
          "the server is shutting down: the text's tokenization was stopped (", status.message(), ")"));
    } else if (cancelled() && absl::Now() + kDeadlineSlack < stop.deadline) {
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
  config_.metrics->RecordTokenizationStopped(reason);
  if (large) {
    SCORED_LOG(INFO) << method << ": tokenization of " << text.size() << " bytes stopped (" << reason
                     << "): " << stopped.message();
  }
  return stopped;
}

absl::StatusOr<std::vector<int32_t>> ScoreGate::TokenizeAndWait(absl::string_view method,
                                                                const std::string& text, bool has_add_bos,
                                                                bool add_bos, int64_t max_tokens) const {
  absl::Status checked = CheckText(text);
  if (!checked.ok()) return checked;
  // Shared with the job: the Notification may be destroyed only once Notify has returned.
  struct Wait {
    absl::StatusOr<std::vector<int32_t>> ids;
    absl::Notification done;
  };
  auto wait = std::make_shared<Wait>();
  absl::Status queued = SubmitTokenization([this, wait, method, &text, has_add_bos, add_bos, max_tokens] {
    wait->ids = Tokenize(method, text, has_add_bos, add_bos, max_tokens, TokenizeStop{});
    wait->done.Notify();
  });
  if (!queued.ok()) return queued;
  wait->done.WaitForNotification();
  return std::move(wait->ids);
}

absl::StatusOr<MemoryBudget::Charge> ScoreGate::Charge(int64_t bytes, absl::string_view method,
                                                       int64_t headroom) const {
  absl::StatusOr<MemoryBudget::Charge> taken = TryCharge(bytes, headroom);
  if (!taken.ok()) CountBudgetRefusal(method);
  return taken;
}

absl::StatusOr<MemoryBudget::Charge> ScoreGate::TryCharge(int64_t bytes, int64_t headroom) const {
  return config_.budget->TryCharge(bytes, headroom);
}

void ScoreGate::CountBudgetRefusal(absl::string_view method) const {
  config_.metrics->RecordLimitRejection("max_buffered_bytes", std::string(method));
}

}  // namespace scored

#include "server/fault_injection.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace scored {

namespace {

// A bound on N and T (a billion batches, or 11.6 days): every test uses small values, and a typo with a few
// digits too many should not turn into a process that sleeps for ever.
constexpr int64_t kMaxFaultValue = 1000000000;

}  // namespace

absl::StatusOr<FaultInjection> ParseFaultInjection(const std::string& text) {
  FaultInjection fault;
  if (text.empty()) return fault;
  constexpr absl::string_view kFatalAfter = "fatal_after:";
  constexpr absl::string_view kFatalAfterMs = "fatal_after_ms:";
  constexpr absl::string_view kSlowLoadMs = "slow_load_ms:";
  constexpr absl::string_view kDeviceTrapAfter = "device_trap_after:";
  int64_t n = -1;
  if (absl::StartsWith(text, kFatalAfter) && absl::SimpleAtoi(text.substr(kFatalAfter.size()), &n) &&
      n >= 0 && n <= kMaxFaultValue) {
    fault.fatal_after_batches = n;
    return fault;
  }
  if (absl::StartsWith(text, kFatalAfterMs) && absl::SimpleAtoi(text.substr(kFatalAfterMs.size()), &n) &&
      n >= 0 && n <= kMaxFaultValue) {
    fault.fatal_after_ms = n;
    return fault;
  }
  if (absl::StartsWith(text, kSlowLoadMs) && absl::SimpleAtoi(text.substr(kSlowLoadMs.size()), &n) &&
      n >= 0 && n <= kMaxFaultValue) {
    fault.slow_load_ms = n;
    return fault;
  }
  if (absl::StartsWith(text, kDeviceTrapAfter) &&
      absl::SimpleAtoi(text.substr(kDeviceTrapAfter.size()), &n) && n >= 0 && n <= kMaxFaultValue) {
    fault.device_trap_after_batches = n;
    return fault;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--fault_inject must be fatal_after:N, fatal_after_ms:T, slow_load_ms:T or "
                   "device_trap_after:N with N, T in [0, 1000000000], "
                   "got '",
                   text, "'"));
}

void FaultInjectingEngine::CheckTimedFault() const {
  if (fault_.fatal_after_ms < 0 || !fatal_.ok()) return;
  if (absl::Now() - created_ >= absl::Milliseconds(fault_.fatal_after_ms)) {
    fatal_ = absl::UnavailableError(absl::StrCat("injected fatal engine error ", fault_.fatal_after_ms,
                                                 " ms after start (--fault_inject)"));
  }
}

std::vector<absl::StatusOr<ScoreResult>> FaultInjectingEngine::Score(absl::Span<const ScoreRequest> batch) {
  {
    absl::MutexLock lock(&mu_);
    CheckTimedFault();
    if (!fatal_.ok()) return std::vector<absl::StatusOr<ScoreResult>>(batch.size(), fatal_);
  }
  if (fault_.fatal_after_batches >= 0 && batches_ >= fault_.fatal_after_batches) {
    absl::MutexLock lock(&mu_);
    if (fatal_.ok()) {
      fatal_ = absl::UnavailableError(
          absl::StrCat("injected fatal engine error after ", batches_, " batches (--fault_inject)"));
    }
    return std::vector<absl::StatusOr<ScoreResult>>(batch.size(), fatal_);
  }
  ++batches_;
  return engine_->Score(batch);
}

absl::Status FaultInjectingEngine::fatal_status() const {
  {
    absl::MutexLock lock(&mu_);
    CheckTimedFault();
    if (!fatal_.ok()) return fatal_;
  }
  return engine_->fatal_status();
}

}  // namespace scored

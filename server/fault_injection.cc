#include "server/fault_injection.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace scored {

absl::StatusOr<FaultInjection> ParseFaultInjection(const std::string& text) {
  FaultInjection fault;
  if (text.empty()) return fault;
  constexpr absl::string_view kFatalAfter = "fatal_after:";
  int64_t n = -1;
  if (!absl::StartsWith(text, kFatalAfter) || !absl::SimpleAtoi(text.substr(kFatalAfter.size()), &n) ||
      n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--fault_inject must be fatal_after:N with N >= 0, got '", text, "'"));
  }
  fault.fatal_after_batches = n;
  return fault;
}

absl::StatusOr<std::vector<ScoreResult>> FaultInjectingEngine::Score(absl::Span<const ScoreRequest> batch) {
  if (fault_.fatal_after_batches >= 0 && batches_ >= fault_.fatal_after_batches) {
    absl::MutexLock lock(&mu_);
    if (fatal_.ok()) {
      fatal_ = absl::UnavailableError(
          absl::StrCat("injected fatal engine error after ", batches_, " batches (--fault_inject)"));
    }
    return fatal_;
  }
  ++batches_;
  return engine_->Score(batch);
}

absl::Status FaultInjectingEngine::fatal_status() const {
  {
    absl::MutexLock lock(&mu_);
    if (!fatal_.ok()) return fatal_;
  }
  return engine_->fatal_status();
}

}  // namespace scored

#include "server/score_call.h"

#include <chrono>

#include "server/admission.h"

namespace scored {

absl::Time CallDeadline(const grpc::CallbackServerContext* context) {
  const std::chrono::system_clock::time_point d = context->deadline();
  if (d == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(d);
}

double SecondsSince(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

absl::Status ExplainCancel(const absl::Status& status, absl::Time deadline) {
  if (status.code() == absl::StatusCode::kCancelled && absl::Now() + kDeadlineSlack >= deadline) {
    return absl::DeadlineExceededError("the deadline passed before the request was scored");
  }
  return status;
}

}  // namespace scored

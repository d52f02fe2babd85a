// What the Scorer reactors (server/score_unary.h, server/score_stream.h) share about a call: its deadline,
// its latency and how a cancellation is worded.
//
// Thread-safety: stateless functions.
#ifndef SCORED_SERVER_SCORE_CALL_H_
#define SCORED_SERVER_SCORE_CALL_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"

namespace scored {

// The call's deadline; InfiniteFuture when the client set none.
absl::Time CallDeadline(const grpc::CallbackServerContext* context);

// Seconds from `start` to now (scored_request_duration_seconds).
double SecondsSince(absl::Time start);

// A CANCELLED result within kDeadlineSlack (server/admission.h) of `deadline` is the deadline passing:
// DEADLINE_EXCEEDED "the deadline passed before the request was scored". Any other status is returned as is.
absl::Status ExplainCancel(const absl::Status& status, absl::Time deadline);

}  // namespace scored

#endif  // SCORED_SERVER_SCORE_CALL_H_

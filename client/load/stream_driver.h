// scored-load's stream mode (internal to client/load/): one client's ScoreStream calls, each keeping up to
// `inflight` requests outstanding (load_runner.h describes the mode and how a cancel-kind request cancels a
// whole stream).
#ifndef SCORED_CLIENT_LOAD_STREAM_DRIVER_H_
#define SCORED_CLIENT_LOAD_STREAM_DRIVER_H_

#include "client/load/driver.h"
#include "grpcpp/grpcpp.h"

namespace scored {
namespace load {

// Client `client`: opens a ScoreStream on `channel` (one deadline for the stream, LoadOptions::deadline),
// writes requests from a helper thread while shared->TakeTicket() and reads the responses on the calling
// thread, matched by request_id; requests never answered take the stream's final status. After a
// cancel-kind request cancelled the stream it opens the next one. Outcomes go to *stats. Returns when the
// tickets run out, the stream ends otherwise, or after an UNAVAILABLE outcome with stop_on_unavailable
// (stats->stopped_unavailable). `channel` and `stats` are not owned and not shared with another client.
void RunStreamClient(int client, SharedRun* shared, grpc::Channel* channel, ClientStats* stats);

}  // namespace load
}  // namespace scored

#endif  // SCORED_CLIENT_LOAD_STREAM_DRIVER_H_

// scored-load's closed loop in unary mode (internal to client/load/): one client with one blocking Score
// call outstanding at a time, sending the next as soon as the last one finished.
#ifndef SCORED_CLIENT_LOAD_CLOSED_LOOP_H_
#define SCORED_CLIENT_LOAD_CLOSED_LOOP_H_

#include "client/load/driver.h"
#include "grpcpp/grpcpp.h"
#include "scored/v1/scorer.grpc.pb.h"

namespace scored {
namespace load {

// Client `client`: while shared->TakeTicket(), draws a request kind and ids and calls Score on `stub`
// (raw invalid-UTF-8 bytes through a generic call on `channel` for kMalformedRawBytes; a cancel-kind call
// is cancelled after CancelDelay), with options.deadline per call; counts each outcome in *stats (OK
// responses checked by CheckResponse). Returns when the tickets run out, or after an UNAVAILABLE outcome
// with options.stop_on_unavailable (stats->stopped_unavailable). Blocks the calling thread; `stub`,
// `channel` and `stats` are not owned and not shared with another client.
void RunUnaryClient(int client, SharedRun* shared, scored::v1::Scorer::Stub* stub, grpc::Channel* channel,
                    ClientStats* stats);

}  // namespace load
}  // namespace scored

#endif  // SCORED_CLIENT_LOAD_CLOSED_LOOP_H_

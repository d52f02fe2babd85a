// scored-load's open loop (internal to client/load/; load_runner.h describes the method): request i is
// started at start + i / rate through the asynchronous stub whether or not earlier ones finished, and its
// latency runs from that scheduled start (no coordinated omission).
#ifndef SCORED_CLIENT_LOAD_OPEN_LOOP_H_
#define SCORED_CLIENT_LOAD_OPEN_LOOP_H_

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "client/load/driver.h"
#include "scored/v1/scorer.grpc.pb.h"

namespace scored {
namespace load {

// What an open-loop run measured besides the per-request outcomes.
struct OpenLoopTally {
  double rate_achieved = 0.0;       // (started - 1) / (last start - first start); 0 below 2 starts
  double lag_max_ms = 0.0;          // largest lag of an actual start behind its schedule
  int64_t max_outstanding = 0;      // most requests outstanding at once
  std::vector<int64_t> per_server;  // requests started per stub (same order as `stubs`)
};

// Runs the open loop at shared->options().rate from `start`: normal requests only, each to the stub with
// the fewest outstanding (round-robin among equals), until the duration has passed, the tickets ran out,
// `stop` was set or (with stop_on_unavailable) a request ended UNAVAILABLE; then waits for every request
// outstanding. Outcomes go to *stats (serialized: callbacks run on gRPC's threads). Blocks the calling
// thread; `stubs` and `stats` are not owned.
OpenLoopTally RunOpenLoop(SharedRun* shared, std::vector<scored::v1::Scorer::Stub*> stubs, absl::Time start,
                          ClientStats* stats);

}  // namespace load
}  // namespace scored

#endif  // SCORED_CLIENT_LOAD_OPEN_LOOP_H_

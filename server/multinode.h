// Multi-process tensor parallelism from the server's side (`scored --tp N --nnodes M --node_rank R
// --rendezvous HOST:PORT`; README "Tensor parallelism"). Every process runs N / M ranks on its local GPUs
// 0 .. N/M-1. Node rank 0 is the normal server: the engine does the leader's part of the bootstrap inside
// CreateEngine. A node rank > 0 is a follower: no gRPC or metrics listener, only the engine's ranks
// (RunFollower in engine/engine.h), until the leader shuts down (exit 0) or is lost (exit 1).
#ifndef SCORED_SERVER_MULTINODE_H_
#define SCORED_SERVER_MULTINODE_H_

#include "absl/status/status.h"
#include "engine/engine.h"
#include "server/options.h"

namespace scored {

// The follower process (options.engine.node_rank > 0, options validated): logs what it is, then blocks in the
// engine's RunFollower(). OK after the leader's clean shutdown; otherwise the engine's error (UNAVAILABLE
// when the leader is lost) with this process's role prefixed to the message.
absl::Status RunFollowerNode(const ServerOptions& options);

}  // namespace scored

#endif  // SCORED_SERVER_MULTINODE_H_

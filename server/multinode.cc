#include "server/multinode.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "engine/base/logging.h"
#include "server/server.h"

namespace scored {

absl::Status RunFollowerNode(const ServerOptions& options) {
  const EngineOptions& e = options.engine;
  const int local = e.tp / e.nnodes;
  const std::string who = absl::StrCat(
      "follower node rank ", e.node_rank, " of ", e.nnodes, " (tensor-parallel ranks ", e.node_rank * local,
      "..", (e.node_rank + 1) * local - 1, " of ", e.tp, " on local GPUs 0..", local - 1, ")");
  SCORED_LOG(INFO) << "scored " << ServerVersion() << ": " << who << ", model " << e.model_dir
                   << ", leader at " << e.rendezvous << "; no gRPC listener on this node";
  const absl::Status status = RunFollower(e);
  if (status.ok()) {
    SCORED_LOG(INFO) << "scored: " << who << ": the leader shut down cleanly";
    return status;
  }
  return absl::Status(status.code(), absl::StrCat(who, ": ", status.message()));
}

}  // namespace scored

// Multi-process tensor parallelism from the server's side (`scored --tp N --nnodes M --node_rank R
// --rendezvous HOST:PORT`; README "Tensor parallelism"). Every process runs N / M ranks on its local GPUs
// 0 .. N/M-1. Node rank 0 is the normal server: the engine does the leader's part of the bootstrap inside
// CreateEngine. A node rank > 0 is a follower: no gRPC or metrics listener, only the engine's ranks
// (RunFollower in engine/engine.h), until the leader shuts down (exit 0) or is lost (exit 1).
// Leader and followers talk over the gRPC control plane of server/control_service.h, protected by the same
// --tls_cert / --tls_key / --tls_client_ca / --auth_token_file as the Score service.
#ifndef SCORED_SERVER_MULTINODE_H_
#define SCORED_SERVER_MULTINODE_H_

#include "absl/status/status.h"
#include "engine/engine.h"
#include "server/options.h"

namespace scored {

// For a multi-process run (options->engine.nnodes > 1; a no-op otherwise): sets
// options->engine.control_transport to the gRPC control plane with the security flags of `options`
// (reading the certificate, key, CA and token files now: INVALID_ARGUMENT names a bad one). Logs a
// warning when the control port would be open to anyone (neither TLS nor a token). Call it once the
// options are validated, before Server::Create (the leader) or RunFollowerNode (a follower).
absl::Status AttachControlTransport(ServerOptions* options);

// The follower process (options.engine.node_rank > 0, options validated): logs what it is, then blocks in the
// engine's RunFollower(). OK after the leader's clean shutdown; otherwise the engine's error (UNAVAILABLE
// when the leader is lost) with this process's role prefixed to the message.
absl::Status RunFollowerNode(const ServerOptions& options);

}  // namespace scored

#endif  // SCORED_SERVER_MULTINODE_H_

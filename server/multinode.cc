#include "server/multinode.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "engine/base/logging.h"
#include "engine/base/status_macros.h"
#include "server/control_service.h"
#include "server/server.h"

namespace scored {

absl::Status AttachControlTransport(ServerOptions* options) {
  if (options->engine.nnodes <= 1) return absl::OkStatus();
  ControlSecurity security;
  security.tls = TlsFiles{options->tls_cert_file, options->tls_key_file, options->tls_client_ca_file};
  security.auth_token_file = options->auth_token_file;
  ControlServiceOptions control;
  control.join_timeout = options->rendezvous_timeout;
  SCORED_ASSIGN_OR_RETURN(options->engine.control_transport,
                          GrpcControlTransportFactory::Create(security, control));
  if (options->tls_cert_file.empty() && options->auth_token_file.empty()) {
    SCORED_LOG(WARNING) << "the control channel (--rendezvous " << options->engine.rendezvous
                        << ") has neither TLS nor a bearer token: anyone who reaches node rank 0's port can "
                           "join it; set --auth_token_file (and --tls_cert/--tls_key) on every node";
  }
  return absl::OkStatus();
}

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

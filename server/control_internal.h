// What the two sides of the control plane (server/control_service.h) share, for its files only:
// control_service.cc (the factory and these helpers), control_leader.cc (node rank 0's gRPC server and its
// Join reactors), control_follower.cc (a follower's Join call).
//
// Thread-safety: the Material is immutable once the factory is created; LossWatcher as documented below.
#ifndef SCORED_SERVER_CONTROL_INTERNAL_H_
#define SCORED_SERVER_CONTROL_INTERNAL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/control_service.h"
#include "server/security.h"

namespace scored {

struct GrpcControlTransportFactory::Material {
  std::shared_ptr<grpc::ServerCredentials> server_credentials;    // leader: plaintext, TLS or mTLS
  std::unique_ptr<BearerTokenAuth> auth;                          // leader: null = no token required
  std::string token;                                              // follower: sent when non-empty
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials;  // follower
};

namespace control_internal {

inline int64_t Ms(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

// gRPC's codes are google.rpc.Code, as absl's.
absl::Status FromGrpcStatus(const grpc::Status& s);

struct HostPort {
  std::string host;
  int port = 0;
};

// "host:port" or "[v6]:port" (the form followers dial); the port in [0, 65535]. INVALID_ARGUMENT
// "malformed rendezvous address '...': <why>" otherwise.
absl::StatusOr<HostPort> ParseRendezvous(absl::string_view address);

// Runs on_lost once on a thread of its own when `lost()` (checked under `mu`) turns non-OK, unless the
// transport closes first.
class LossWatcher {
 public:
  ~LossWatcher() { Stop(); }
  void Start(absl::Mutex* mu, std::function<absl::Status()> lost,
             std::function<void(const absl::Status&)> on_lost);
  // Before the watched state goes away; the caller must not hold `mu`.
  void Stop();

 private:
  absl::Mutex* mu_ = nullptr;
  bool stop_ = false;  // under *mu_
  std::thread thread_;
};

}  // namespace control_internal
}  // namespace scored

#endif  // SCORED_SERVER_CONTROL_INTERNAL_H_

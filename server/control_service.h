// The control plane of multi-process tensor parallelism over gRPC (engine/dist/control_transport.h): the
// `scored.v1.Control` service (proto/scored/v1/control.proto), one bidirectional stream from each follower
// to node rank 0, with the Score service's transport security and bearer token (server/security.h).
//
// Leader (node rank 0): a gRPC server of its own on the --rendezvous port (every local address), callback
// API. Each follower's Join stream is checked for the bearer token before anything is read (a refused
// peer gets UNAUTHENTICATED and the leader logs a warning naming its address; with TLS or mTLS a peer
// that fails the handshake never reaches the service); then the follower's hello (node rank, nnodes,
// protocol version); once all nnodes-1 joined, every stream gets the payload, then every Broadcast().
// Shutdown() ends every stream with status OK (the clean end); anything else a follower sees is a loss.
//
// Follower: a gRPC channel to HOST:PORT, the token as `authorization: Bearer <token>` call metadata (as
// the Score clients send it); until the join timeout each failed attempt (leader not listening yet) is
// retried every ~200 ms. A refusal by the leader (FAILED_PRECONDITION, UNAUTHENTICATED) ends the join at
// once. A TLS handshake that fails (TLS on one side only, an untrusted certificate, no client certificate
// under mTLS) looks to gRPC like a leader that is not up yet, so it is retried as well; at the join
// timeout the follower returns UNAVAILABLE ("closed every connection during the handshake") when its
// attempts got a connection that the leader closed, else DEADLINE_EXCEEDED ("could not reach the
// leader"); both carry gRPC's last error.
//
// Security settings (ControlSecurity, from the Score flags; server/README.md "Security model"):
//   leader    listens with BuildServerCredentials(tls) (plaintext, TLS or mTLS) and requires the token of
//             auth_token_file when set;
//   follower  plaintext when tls.cert_file is empty, else TLS that verifies the leader's certificate against
//             the certificates of tls.client_ca_file (if set) and of tls.cert_file (a certificate shared by
//             the nodes, self-signed or a chain file that includes its root), for the HOST of --rendezvous;
//             under mTLS (tls.client_ca_file set) it presents tls.cert_file / tls.key_file as its client
//             certificate (so that certificate needs clientAuth as well as serverAuth usage); it sends the
//             token of auth_token_file when set. The same flags on every node thus give a working group.
//
// Liveness: a killed peer closes its connection at once: the other end notices within milliseconds (the
// leader's stream is cancelled, the follower's call ends). A vanished host (no FIN, no RST) is noticed by
// HTTP/2 keepalive pings on both ends: a ping every keepalive_time and a connection with no ping answer
// within keepalive_timeout is closed, i.e. within keepalive_time + keepalive_timeout (10 s by default);
// both ends allow pings on idle streams (GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, the server's
// http2 ping policy). A follower that stops reading (flow control) fails the leader's Broadcast() after
// peer_timeout.
//
// Thread-safety: as ControlTransport / ControlTransportFactory; the factory is immutable after Create()
// and its Leader() / Follower() may be called from any thread.
#ifndef SCORED_SERVER_CONTROL_SERVICE_H_
#define SCORED_SERVER_CONTROL_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/dist/control_transport.h"
#include "server/security.h"

namespace scored {

// Largest control message (the payload, one batch), bytes; Broadcast() refuses a larger one with
// INVALID_ARGUMENT. Both ends set gRPC's message size limits from it. A follower's hello is tiny, so the
// leader accepts at most kMaxFollowerMessageBytes from a peer.
constexpr int64_t kMaxControlMessageBytes = int64_t{256} << 20;
constexpr int64_t kMaxFollowerMessageBytes = 4096;
// Bumped whenever control.proto's meaning changes; a follower of another version is refused.
constexpr uint32_t kControlProtocolVersion = 1;

struct ControlSecurity {
  TlsFiles tls;                 // the Score service's --tls_cert / --tls_key / --tls_client_ca
  std::string auth_token_file;  // the Score service's --auth_token_file; empty = no token
};

struct ControlServiceOptions {
  // Leader: every follower joined; follower: the leader reached and the payload received.
  absl::Duration join_timeout = absl::Seconds(300);
  // A Broadcast() whose previous message a follower has not taken within this fails (a stalled follower);
  // also how long Shutdown() waits for the followers to be told.
  absl::Duration peer_timeout = absl::Seconds(30);
  // HTTP/2 keepalive on both ends (a vanished host: see the header comment).
  absl::Duration keepalive_time = absl::Seconds(5);
  absl::Duration keepalive_timeout = absl::Seconds(5);
  // Leader, when set: called once with the bound port when the listener is up (tests use port 0).
  std::function<void(int port)> on_listening;
};

// The ControlTransportFactory that the server gives the engine (EngineOptions::control_transport).
class GrpcControlTransportFactory final : public dist::ControlTransportFactory {
 public:
  // Reads the certificate, key, CA and token files now, so that a bad file fails at startup.
  // INVALID_ARGUMENT names the flag (as BuildServerCredentials / BearerTokenAuth::FromFile).
  static absl::StatusOr<std::shared_ptr<GrpcControlTransportFactory>> Create(
      const ControlSecurity& security, const ControlServiceOptions& options = ControlServiceOptions());

  // See dist::ControlTransportFactory. `rendezvous`: HOST:PORT ([IPv6]:PORT); the leader listens on
  // [::]:PORT (every address, IPv4 too); PORT 0 (tests) picks a free port, see on_listening.
  absl::StatusOr<std::unique_ptr<dist::ControlTransport>> Leader(absl::string_view rendezvous, int nnodes,
                                                                 absl::string_view payload) override;
  absl::StatusOr<std::unique_ptr<dist::ControlTransport>> Follower(absl::string_view rendezvous, int nnodes,
                                                                   int node_rank) override;

  struct Material;  // the files' contents (control_service.cc)

 private:
  GrpcControlTransportFactory(std::shared_ptr<const Material> material, ControlServiceOptions options)
      : material_(std::move(material)), options_(std::move(options)) {}
  const std::shared_ptr<const Material> material_;
  const ControlServiceOptions options_;
};

}  // namespace scored

#endif  // SCORED_SERVER_CONTROL_SERVICE_H_

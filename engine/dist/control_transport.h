// The control plane of multi-process tensor parallelism as the engine sees it: an interface, so that
// engine/ stays free of any network stack. `server/` implements it over gRPC with the Score service's TLS /
// mTLS / bearer-token settings (server/control_service.h); tests may implement it in memory.
//
// One end per process. The leader (node_rank 0, which serves Score) and the M-1 followers exchange
//   1. the bootstrap: every follower joins the leader; the leader answers each with the same `payload`
//      (the NCCL unique id bytes plus the model fingerprint: a follower with another model refuses itself);
//   2. the work: the leader sends every batch (an opaque byte string, dist/batch_wire.h) to every follower
//      before its own ranks start the forward; followers run the same forward on their GPUs;
//   3. liveness: a peer that goes away (process killed: about a second; host vanished: within
//      ControlTransportOptions::peer_timeout plus the keepalive interval) is reported by WatchPeers(), so no
//      rank waits forever in a collective that cannot complete.
// NCCL moves the tensors; this channel moves only a few KB per batch.
//
// Thread-safety: Broadcast() / Receive() from one thread at a time (the engine's scoring thread);
// WatchPeers()' callback runs on a thread of the transport; Shutdown() and the destructor may be called from
// any thread (the destructor not while another thread is inside Receive() / Broadcast()).
#ifndef SCORED_ENGINE_DIST_CONTROL_TRANSPORT_H_
#define SCORED_ENGINE_DIST_CONTROL_TRANSPORT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace scored::dist {

// One process's end of the control plane.
class ControlTransport {
 public:
  virtual ~ControlTransport() = default;  // closes the end (followers then see UNAVAILABLE, not a clean end)

  virtual int node_rank() const = 0;
  virtual int nnodes() const = 0;
  virtual const std::string& payload() const = 0;  // the leader's bootstrap payload (on the leader too)

  // Leader: sends `message` to every follower (in node_rank order). UNAVAILABLE naming the node rank whose
  // connection failed or stalled; the transport is then broken (every later call fails).
  virtual absl::Status Broadcast(absl::string_view message) = 0;

  // Follower: blocks until the leader's next message. CANCELLED after the leader's Shutdown() (a clean end);
  // UNAVAILABLE when the leader went away without one; INTERNAL after a protocol error. Messages sent before
  // the end are all delivered first; every later call returns the same end status.
  virtual absl::StatusOr<std::string> Receive() = 0;

  // Leader: tells every follower to end cleanly (their Receive() returns CANCELLED). Idempotent; after it,
  // Broadcast() fails with FAILED_PRECONDITION and WatchPeers() reports nothing. On a follower: OK, no-op.
  virtual absl::Status Shutdown() = 0;

  // Calls on_lost once, with UNAVAILABLE naming the node rank, on the first peer that went away (the leader
  // watches every follower, a follower its leader) or a failed Broadcast(); never for a clean shutdown. Call
  // at most once; on_lost must not destroy the transport.
  virtual void WatchPeers(std::function<void(const absl::Status&)> on_lost) = 0;
};

// Makes the ends. The server passes one to the engine (EngineOptions::control_transport).
class ControlTransportFactory {
 public:
  virtual ~ControlTransportFactory() = default;

  // Leader: listens on `rendezvous` (HOST:PORT, the address followers connect to; it listens on every local
  // address at PORT), blocks until all nnodes-1 followers joined (each node_rank in [1, nnodes) once, same
  // nnodes), then gives each `payload`. INVALID_ARGUMENT for a malformed address or nnodes < 2;
  // DEADLINE_EXCEEDED naming the node ranks that did not join in time; FAILED_PRECONDITION for a duplicate
  // node_rank or an nnodes mismatch. A peer that fails authentication is refused and logged, never joined.
  virtual absl::StatusOr<std::unique_ptr<ControlTransport>> Leader(absl::string_view rendezvous, int nnodes,
                                                                   absl::string_view payload) = 0;

  // Follower (node_rank in [1, nnodes)): connects to the leader at `rendezvous`, retrying until the join
  // timeout (the leader may start later), joins and waits for the payload. DEADLINE_EXCEEDED when the
  // leader was not reached in time; FAILED_PRECONDITION when the leader refused the join (its message);
  // UNAUTHENTICATED / UNAVAILABLE when the leader refused this process's credentials or transport security.
  virtual absl::StatusOr<std::unique_ptr<ControlTransport>> Follower(absl::string_view rendezvous, int nnodes,
                                                                     int node_rank) = 0;
};

}  // namespace scored::dist

#endif  // SCORED_ENGINE_DIST_CONTROL_TRANSPORT_H_

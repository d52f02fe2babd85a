// The control plane of multi-process tensor parallelism (`scored --tp N --nnodes M --node_rank R
// --rendezvous HOST:PORT`, DESIGN.md §7): plain TCP between the leader process (node_rank 0, which serves
// gRPC) and the M-1 follower processes. It carries
//   1. the bootstrap: each follower connects to the leader's rendezvous address and says who it is; the
//      leader answers every follower with the same payload (the NCCL unique id bytes, plus whatever the
//      engine wants every process to agree on, e.g. a model fingerprint to refuse mismatched models);
//   2. the work: the leader sends every batch (an opaque byte string the engine serializes) to every
//      follower before its own ranks start the forward; followers run the same forward on their GPUs;
//   3. liveness: a peer whose connection closes or errors (process killed, host gone) is detected within a
//      bounded time by WatchPeers(), so no rank waits forever in a collective that cannot complete.
// NCCL moves the tensors; this channel moves only a few KB per batch. No CUDA or NCCL here (CPU-testable).
//
// Wire format (both directions): frames of [u32 little-endian kind][u64 little-endian length][bytes].
// Kinds: 1 hello (follower -> leader: [u32 magic "SCRD"][u32 protocol version][u32 node_rank][u32 nnodes]),
// 2 payload (leader -> follower), 3 message (leader -> follower: a batch), 4 shutdown (leader -> follower:
// clean end, empty), 5 reject (leader -> follower: the join failed, the body says why). A frame longer than
// kMaxFrameBytes or of an unknown kind is a protocol error (INTERNAL naming it), never a crash. During the
// join the leader drops (with a warning) a connection whose first frame is not a hello (a port scanner).
//
// Liveness: a killed process closes its sockets at once, so its peers notice within milliseconds. A
// vanished host (no FIN, no RST) is noticed within ~11 s: every connection has SO_KEEPALIVE (probes after
// 5 s idle, every 2 s, 3 of them) and TCP_USER_TIMEOUT of 11 s for unacknowledged data. TCP_NODELAY too.
// Followers never send after their hello.
//
// Thread-safety: Broadcast() / Receive() from one thread at a time (the engine's scoring thread);
// WatchPeers() runs its own thread; Shutdown() and the destructor may be called from any thread (the
// destructor not while another thread is still inside Receive()/Broadcast()). A follower reads the
// leader's frames on a thread of its own, so messages queue up in order until Receive() takes them.
#ifndef SCORED_ENGINE_DIST_CONTROL_CHANNEL_H_
#define SCORED_ENGINE_DIST_CONTROL_CHANNEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/dist/control_transport.h"

namespace scored::dist {

constexpr int64_t kMaxFrameBytes = int64_t{64} << 20;

struct ControlChannelOptions {
  // Leader: all followers joined; follower: leader reached and the payload received.
  absl::Duration connect_timeout = absl::Seconds(300);
  // A send that makes no progress this long fails (the peer stopped reading: its socket buffer is full).
  absl::Duration peer_timeout = absl::Seconds(30);
  // How often the watch thread re-checks state that no socket event signals (a failed Broadcast()).
  absl::Duration watch_interval = absl::Milliseconds(200);
};

// The address a leader listens on for `rendezvous` (HOST:PORT, the address the followers connect to):
// ":PORT", every local address (IPv6 dual-stack where the host has it, else IPv4), because HOST is
// usually a name that resolves to this host only as seen from the others (a Kubernetes headless-service
// name) or the address of one interface. INVALID_ARGUMENT for a malformed address or port 0.
absl::StatusOr<std::string> LeaderListenAddress(absl::string_view rendezvous);

// Plain TCP, no TLS and no authentication: superseded by the gRPC transport (server/control_service.h).
class ControlChannel final : public ControlTransport {
 public:
  // Leader (node_rank 0). `address` is HOST:PORT to listen on (HOST may be 0.0.0.0 or [::], or empty for
  // every address, see LeaderListenAddress(); PORT 0 picks a free port, see port()). Blocks until all
  // nnodes-1 followers have connected and said hello (each node_rank in [1, nnodes) exactly once, same
  // nnodes), then sends each of them `payload`. INVALID_ARGUMENT for a malformed address or nnodes < 2;
  // DEADLINE_EXCEEDED naming the node ranks that did not join within connect_timeout; FAILED_PRECONDITION for
  // a duplicate node_rank or nnodes mismatch. `on_listening(port)`, when set, is called once the socket
  // listens (tests use it to learn the port).
  static absl::StatusOr<std::unique_ptr<ControlChannel>> Leader(
      absl::string_view address, int nnodes, absl::string_view payload,
      const ControlChannelOptions& options = ControlChannelOptions(),
      const std::function<void(int port)>& on_listening = nullptr);

  // Follower (node_rank in [1, nnodes)). Connects to the leader's `address`, retrying until
  // connect_timeout (the leader may start later; the name is re-resolved on every try), says hello and
  // waits for the payload (see payload()), all within connect_timeout.
  // INVALID_ARGUMENT for a malformed address / node_rank / nnodes; DEADLINE_EXCEEDED when the leader
  // could not be reached or sent no payload in time; FAILED_PRECONDITION when the leader refused the join
  // (duplicate node rank, nnodes mismatch, protocol version: the message is the leader's); UNAVAILABLE
  // when the leader closed the connection before the payload; INTERNAL for a protocol error.
  static absl::StatusOr<std::unique_ptr<ControlChannel>> Follower(
      absl::string_view address, int nnodes, int node_rank,
      const ControlChannelOptions& options = ControlChannelOptions());

  // Closes every connection (followers then see UNAVAILABLE, not a clean shutdown).
  ~ControlChannel() override;
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  int node_rank() const override;
  int nnodes() const override;
  int port() const;                             // leader: the listening port
  const std::string& payload() const override;  // the leader's payload (on the leader too)

  // Leader: sends `message` to every follower (in node_rank order). UNAVAILABLE naming the node rank whose
  // connection failed or stalled for peer_timeout; the channel is then broken (every later call fails).
  absl::Status Broadcast(absl::string_view message) override;

  // Follower: blocks until the leader's next message. CANCELLED after the leader's Shutdown() (clean end);
  // UNAVAILABLE when the leader's connection closed or failed without a shutdown (the leader died);
  // INTERNAL after a protocol error (an unknown or oversized frame). Messages sent before the end are
  // all delivered first. Every later call returns the same end status.
  absl::StatusOr<std::string> Receive() override;

  // Leader: tells every follower to end cleanly (their Receive() returns CANCELLED). Idempotent; after it,
  // Broadcast() fails with FAILED_PRECONDITION and WatchPeers() reports nothing. UNAVAILABLE naming the
  // first follower that could not be told (the others still are). On a follower: OK, does nothing.
  absl::Status Shutdown() override;

  // Starts a thread that checks every peer connection each watch_interval; on the first peer that closed
  // or errored (a killed process: its socket closes at once; a vanished host: keepalive / send timeout)
  // it calls on_lost once with UNAVAILABLE naming the node rank. A follower watches the leader; the leader
  // watches all followers. Stopped by the destructor. Call at most once. on_lost runs on the watch thread
  // and must not destroy the channel. The leader also reports a Broadcast() failure through it; a
  // follower also reports a protocol error from the leader (as UNAVAILABLE), never a clean shutdown.
  void WatchPeers(std::function<void(const absl::Status&)> on_lost) override;

 private:
  struct Impl;
  explicit ControlChannel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The ControlTransportFactory of the plain TCP channel above: the engine's fallback when
// EngineOptions::control_transport is null. Leader() listens on LeaderListenAddress(rendezvous).
class TcpControlTransportFactory final : public ControlTransportFactory {
 public:
  explicit TcpControlTransportFactory(const ControlChannelOptions& options = ControlChannelOptions())
      : options_(options) {}

  absl::StatusOr<std::unique_ptr<ControlTransport>> Leader(absl::string_view rendezvous, int nnodes,
                                                           absl::string_view payload) override;
  absl::StatusOr<std::unique_ptr<ControlTransport>> Follower(absl::string_view rendezvous, int nnodes,
                                                             int node_rank) override;

 private:
  const ControlChannelOptions options_;
};

}  // namespace scored::dist

#endif  // SCORED_ENGINE_DIST_CONTROL_CHANNEL_H_

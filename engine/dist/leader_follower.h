// The leader / follower protocol of multi-process tensor parallelism (DESIGN.md §7, engine/dist/README.md)
// on top of a ControlTransport (control_transport.h), without CUDA or NCCL (CPU-testable):
//   - the bootstrap payload: the NCCL unique id bytes, then the model fingerprint; a follower whose model
//     has another fingerprint refuses itself (FAILED_PRECONDITION) before touching a GPU;
//   - the leader sends every packed batch (batch_wire.h) to every follower before its own ranks run it;
//   - a follower receives batches until the leader's clean shutdown and runs each on its ranks;
//   - WatchPeers(): a lost peer is reported once, so the engine can abort its communicators (no rank waits
//     forever in a collective).
// The CUDA engine (engine/cuda/cuda_engine.cc) owns the ranks; it hands this layer callbacks.
//
// Thread-safety: as ControlTransport: Broadcast() / Run() from the engine's scoring thread; the WatchPeers()
// callback runs on a transport thread; Shutdown() and the destructor from any thread.
#ifndef SCORED_ENGINE_DIST_LEADER_FOLLOWER_H_
#define SCORED_ENGINE_DIST_LEADER_FOLLOWER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/cuda/batch_pack.h"
#include "engine/dist/control_transport.h"

namespace scored::dist {

// The leader's bootstrap payload: `nccl_id` (the communicator's unique id bytes), then `fingerprint`.
std::string MakeBootstrapPayload(absl::string_view nccl_id, absl::string_view fingerprint);

// The NCCL id of a bootstrap payload whose id has `id_bytes` bytes, when the leader's fingerprint is this
// process's `fingerprint`. INTERNAL for a payload shorter than id_bytes; FAILED_PRECONDITION naming both
// fingerprints and `model_dir` when they differ.
absl::StatusOr<std::string> CheckBootstrapPayload(absl::string_view payload, size_t id_bytes,
                                                  absl::string_view fingerprint, absl::string_view model_dir);

// Node rank 0's end.
class Leader {
 public:
  // Waits until every follower joined at `rendezvous` and gave each the bootstrap payload. Errors as
  // ControlTransportFactory::Leader.
  static absl::StatusOr<std::unique_ptr<Leader>> Start(ControlTransportFactory& factory,
                                                       absl::string_view rendezvous, int nnodes,
                                                       absl::string_view nccl_id,
                                                       absl::string_view fingerprint);
  // Closes the end: followers that were not told to Shutdown() see the leader lost.
  ~Leader() = default;

  // Tells every follower to end cleanly (their Run() returns OK). Idempotent. UNAVAILABLE naming the first
  // follower that could not be told (the others still are).
  absl::Status Shutdown();

  // Sends `batch` to every follower; call before the leader's own ranks run it (they pair up in
  // collectives). UNAVAILABLE naming the follower that is gone: the engine must then fail.
  absl::Status Broadcast(const cuda::PackedBatch& batch);

  // on_lost(UNAVAILABLE naming the node rank) once, on the first follower that went away. Call once, after
  // the ranks on_lost touches exist.
  void WatchPeers(std::function<void(const absl::Status&)> on_lost);

 private:
  explicit Leader(std::unique_ptr<ControlTransport> transport) : transport_(std::move(transport)) {}
  std::unique_ptr<ControlTransport> transport_;
};

// Node rank >= 1's end.
class Follower {
 public:
  // Joins the leader at `rendezvous` and checks its bootstrap payload (CheckBootstrapPayload). Errors as
  // ControlTransportFactory::Follower and CheckBootstrapPayload.
  static absl::StatusOr<std::unique_ptr<Follower>> Join(ControlTransportFactory& factory,
                                                        absl::string_view rendezvous, int nnodes,
                                                        int node_rank, size_t nccl_id_bytes,
                                                        absl::string_view fingerprint,
                                                        absl::string_view model_dir);

  const std::string& nccl_id() const { return nccl_id_; }

  // As Leader::WatchPeers, for the leader.
  void WatchPeers(std::function<void(const absl::Status&)> on_lost);

  // Runs the leader's batches until its clean shutdown (then OK). Before each batch it returns
  // fatal_status() if that is not OK; each batch is parsed (ParseBatch with max_tokens) and given to
  // run_batch. A lost leader (UNAVAILABLE "lost the leader: ..."), a malformed batch or a failed run_batch
  // is handed to fail (which aborts the ranks) and what fail returns is returned.
  absl::Status Run(int64_t max_tokens, const std::function<absl::Status()>& fatal_status,
                   const std::function<absl::Status(const cuda::PackedBatch&)>& run_batch,
                   const std::function<absl::Status(const absl::Status&)>& fail);

 private:
  Follower(std::unique_ptr<ControlTransport> transport, std::string nccl_id)
      : transport_(std::move(transport)), nccl_id_(std::move(nccl_id)) {}
  std::unique_ptr<ControlTransport> transport_;
  std::string nccl_id_;
};

}  // namespace scored::dist

#endif  // SCORED_ENGINE_DIST_LEADER_FOLLOWER_H_

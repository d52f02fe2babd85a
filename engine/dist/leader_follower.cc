#include "engine/dist/leader_follower.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/dist/batch_wire.h"

namespace scored::dist {

std::string MakeBootstrapPayload(absl::string_view nccl_id, absl::string_view fingerprint) {
  return absl::StrCat(nccl_id, fingerprint);
}

absl::StatusOr<std::string> CheckBootstrapPayload(absl::string_view payload, size_t id_bytes,
                                                  absl::string_view fingerprint,
                                                  absl::string_view model_dir) {
  if (payload.size() < id_bytes) return absl::InternalError("the leader's payload is too short");
  const absl::string_view leader_fingerprint = payload.substr(id_bytes);
  if (leader_fingerprint != fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat("the leader serves model ", leader_fingerprint,
                                                      " but this process loaded ", fingerprint, " from ",
                                                      model_dir));
  }
  return std::string(payload.substr(0, id_bytes));
}

absl::StatusOr<std::unique_ptr<Leader>> Leader::Start(ControlTransportFactory& factory,
                                                      absl::string_view rendezvous, int nnodes,
                                                      absl::string_view nccl_id,
                                                      absl::string_view fingerprint) {
  SCORED_ASSIGN_OR_RETURN(std::unique_ptr<ControlTransport> transport,
                          factory.Leader(rendezvous, nnodes, MakeBootstrapPayload(nccl_id, fingerprint)));
  return std::unique_ptr<Leader>(new Leader(std::move(transport)));
}

absl::Status Leader::Shutdown() { return transport_->Shutdown(); }

absl::Status Leader::Broadcast(const cuda::PackedBatch& batch) {
  return transport_->Broadcast(SerializeBatch(batch));
}

void Leader::WatchPeers(std::function<void(const absl::Status&)> on_lost) {
  transport_->WatchPeers(std::move(on_lost));
}

absl::StatusOr<std::unique_ptr<Follower>> Follower::Join(ControlTransportFactory& factory,
                                                         absl::string_view rendezvous, int nnodes,
                                                         int node_rank, size_t nccl_id_bytes,
                                                         absl::string_view fingerprint,
                                                         absl::string_view model_dir) {
  SCORED_ASSIGN_OR_RETURN(std::unique_ptr<ControlTransport> transport,
                          factory.Follower(rendezvous, nnodes, node_rank));
  SCORED_ASSIGN_OR_RETURN(std::string nccl_id,
                          CheckBootstrapPayload(transport->payload(), nccl_id_bytes, fingerprint, model_dir));
  return std::unique_ptr<Follower>(new Follower(std::move(transport), std::move(nccl_id)));
}

void Follower::WatchPeers(std::function<void(const absl::Status&)> on_lost) {
  transport_->WatchPeers(std::move(on_lost));
}

absl::Status Follower::Run(int64_t max_tokens, const std::function<absl::Status()>& fatal_status,
                           const std::function<absl::Status(const cuda::PackedBatch&)>& run_batch,
                           const std::function<absl::Status(const absl::Status&)>& fail) {
  while (true) {
    absl::StatusOr<std::string> message = transport_->Receive();
    if (absl::IsCancelled(message.status())) return absl::OkStatus();  // the leader's clean shutdown
    if (!message.ok()) {
      return fail(absl::UnavailableError(absl::StrCat("lost the leader: ", message.status().message())));
    }
    SCORED_RETURN_IF_ERROR(fatal_status());
    absl::StatusOr<cuda::PackedBatch> batch = ParseBatch(*message, max_tokens);
    if (!batch.ok()) return fail(batch.status());
    const absl::Status run = run_batch(*batch);
    if (!run.ok()) return fail(run);
  }
}

}  // namespace scored::dist

#include "engine/cuda/peer_link.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/cuda_check.h"

namespace scored::cuda {
namespace {

// Enables access from `from` to `to`'s memory; already enabled is fine.
absl::Status EnablePeer(int from, int to) {
  SCORED_CUDA_CHECK(cudaSetDevice(from));
  const cudaError_t err = cudaDeviceEnablePeerAccess(to, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();  // clears it
    return absl::OkStatus();
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(
        absl::StrCat("GPU ", from, " cannot enable peer access to GPU ", to, ": ", cudaGetErrorString(err)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<PeerLink>> PeerLink::Create(int device0, int device1) {
  if (device0 == device1) return absl::InvalidArgumentError("a peer link needs two different GPUs");
  for (const auto& [from, to] : {std::pair{device0, device1}, std::pair{device1, device0}}) {
    int can = 0;
    SCORED_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, from, to));
    if (can == 0)
      return absl::UnavailableError(absl::StrCat("GPU ", from, " cannot reach GPU ", to, "'s memory"));
  }
  int current = 0;
  SCORED_CUDA_CHECK(cudaGetDevice(&current));
  absl::Status status = EnablePeer(device0, device1);
  if (status.ok()) status = EnablePeer(device1, device0);
  SCORED_CUDA_CHECK(cudaSetDevice(current));
  SCORED_RETURN_IF_ERROR(status);
  std::unique_ptr<PeerLink> link(new PeerLink());
  link->ranks_[0].device = device0;
  link->ranks_[1].device = device1;
  return link;
}

PeerLink::~PeerLink() = default;

absl::Status PeerLink::InitRank(int rank, int64_t elements) {
  if (rank < 0 || rank > 1) return absl::InvalidArgumentError(absl::StrCat("peer link rank ", rank));
  RankState& state = ranks_[rank];
  for (int parity = 0; parity < 2; ++parity) {
    SCORED_ASSIGN_OR_RETURN(state.receive[parity],
                            DeviceBuffer::Allocate(elements * 4, "the peer-copy receive buffer"));
    for (CudaEvent& event : state.pushed[parity]) {
      SCORED_ASSIGN_OR_RETURN(event, CudaEvent::Create());
    }
  }
  return absl::OkStatus();
}

void PeerLink::ReleaseRank(int rank) {
  if (rank < 0 || rank > 1) return;
  for (int parity = 0; parity < 2; ++parity) {
    ranks_[rank].receive[parity] = DeviceBuffer();
    for (CudaEvent& event : ranks_[rank].pushed[parity]) event = CudaEvent();
  }
}

absl::StatusOr<int64_t> PeerLink::Push(int rank, int parity, int chunk, const float* src, int64_t offset,
                                       int64_t count, cudaStream_t copy_stream) {
  SCORED_RETURN_IF_ERROR(aborted());
  if (chunk < 0 || chunk >= kMaxChunks || (parity != 0 && parity != 1)) {
    return absl::InvalidArgumentError(absl::StrCat("peer push of chunk ", chunk, ", parity ", parity));
  }
  RankState& me = ranks_[rank];
  const RankState& peer = ranks_[1 - rank];
  float* dst = peer.receive[parity].as<float>() + offset;
  SCORED_CUDA_CHECK(
      cudaMemcpyPeerAsync(dst, peer.device, src, me.device, static_cast<size_t>(count) * 4, copy_stream));
  SCORED_CUDA_CHECK(cudaEventRecord(me.pushed[parity][chunk].get(), copy_stream));
  const int64_t seq = ++me.pushes;
  me.published.store(seq, std::memory_order_release);
  return seq;
}

absl::Status PeerLink::AwaitPeer(int rank, int64_t seq, int parity, int chunk, cudaStream_t stream) {
  if (chunk < 0 || chunk >= kMaxChunks || (parity != 0 && parity != 1)) {
    return absl::InvalidArgumentError(absl::StrCat("peer wait for chunk ", chunk, ", parity ", parity));
  }
  const RankState& me = ranks_[rank];
  const RankState& peer = ranks_[1 - rank];
  // The peer enqueues the same work as this rank, so it is rarely far behind: spin briefly, then sleep.
  const absl::Time deadline = absl::Now() + kAwaitTimeout;
  for (int spins = 0; peer.published.load(std::memory_order_acquire) < seq; ++spins) {
    SCORED_RETURN_IF_ERROR(aborted());
    if (spins < 1000) {
      std::this_thread::yield();
      continue;
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("tensor-parallel rank ", 1 - rank,
                                                      " did not reach row exchange ", seq, " within ",
                                                      absl::FormatDuration(kAwaitTimeout)));
    }
    absl::SleepFor(absl::Microseconds(50));
  }
  SCORED_CUDA_CHECK(cudaStreamWaitEvent(stream, peer.pushed[parity][chunk].get(), 0));
  SCORED_CUDA_CHECK(cudaStreamWaitEvent(stream, me.pushed[parity][chunk].get(), 0));
  return absl::OkStatus();
}

void PeerLink::Abort(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (aborted_.load()) return;
  abort_status_ =
      absl::FailedPreconditionError(absl::StrCat("tensor-parallel peer link aborted: ", why.message()));
  aborted_.store(true);
}

absl::Status PeerLink::aborted() const {
  if (!aborted_.load()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  return abort_status_;
}

}  // namespace scored::cuda

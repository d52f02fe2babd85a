// The CUDA backend (one GPU, or tensor-parallel over several with --tp). Declared without CUDA headers.
#ifndef SCORED_ENGINE_CUDA_CUDA_ENGINE_H_
#define SCORED_ENGINE_CUDA_CUDA_ENGINE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/engine.h"

namespace scored {

// Number of visible CUDA devices; 0 when the runtime reports any error (no driver, no device).
int CudaDeviceCount();

// options.tp > 1: one rank per GPU 0..tp-1, each on its own host thread and stream, joined by NCCL
// (engine/dist/README.md). A checkpoint that cannot be cut for tp fails here naming the rule it breaks.
// A communicator failure or timeout makes fatal_status() UNAVAILABLE and every later Score() return it.
absl::StatusOr<std::unique_ptr<Engine>> CreateCudaEngine(const EngineOptions& options);

// engine.h RunFollower() for the CUDA backend.
absl::Status RunCudaFollower(const EngineOptions& options);

// Testing only: aborts rank `rank`'s NCCL communicator of a tp > 1 CUDA engine, as a failed link would.
// INVALID_ARGUMENT when `engine` is not a CUDA engine with that rank.
absl::Status InjectCommunicatorFaultForTesting(Engine* engine, int rank);

}  // namespace scored

#endif  // SCORED_ENGINE_CUDA_CUDA_ENGINE_H_

// The CUDA backend (one GPU; tensor parallelism lands with engine/dist). Declared without CUDA headers.
#ifndef SCORED_ENGINE_CUDA_CUDA_ENGINE_H_
#define SCORED_ENGINE_CUDA_CUDA_ENGINE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/engine.h"

namespace scored {

// Number of visible CUDA devices; 0 when the runtime reports any error (no driver, no device).
int CudaDeviceCount();

absl::StatusOr<std::unique_ptr<Engine>> CreateCudaEngine(const EngineOptions& options);

}  // namespace scored

#endif  // SCORED_ENGINE_CUDA_CUDA_ENGINE_H_

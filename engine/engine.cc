#include "engine/engine.h"

#include "engine/base/logging.h"
#include "engine/reference/reference_engine.h"
#ifdef SCORED_WITH_CUDA
#include "engine/cuda/cuda_engine.h"
#endif

namespace scored {

bool CudaBackendAvailable() {
#ifdef SCORED_WITH_CUDA
  return CudaDeviceCount() > 0;
#else
  return false;
#endif
}

Backend ResolveBackend(Backend requested) {
  if (requested != Backend::kAuto) return requested;
  return CudaBackendAvailable() ? Backend::kCuda : Backend::kCpu;
}

absl::StatusOr<std::unique_ptr<Engine>> CreateEngine(const EngineOptions& options) {
  const Backend backend = ResolveBackend(options.backend);
  if (backend == Backend::kCpu) {
    if (options.tp != 1) {
      return absl::InvalidArgumentError("--tp > 1 needs the cuda backend; the cpu backend runs one process");
    }
    if (options.fault_device_trap_after_batches >= 0) {
      return absl::InvalidArgumentError(
          "a device trap (--fault_inject=device_trap_after) needs the cuda backend");
    }
    return CreateReferenceEngine(options);
  }
#ifdef SCORED_WITH_CUDA
  return CreateCudaEngine(options);
#else
  return absl::FailedPreconditionError(
      "the cuda backend is not built into this binary (configured with SCORED_ENABLE_CUDA=OFF); use "
      "--backend=cpu");
#endif
}

absl::Status RunFollower(const EngineOptions& options) {
#ifdef SCORED_WITH_CUDA
  return RunCudaFollower(options);
#else
  static_cast<void>(options);
  return absl::FailedPreconditionError(
      "multi-process tensor parallelism needs the cuda backend (configured with SCORED_ENABLE_CUDA=OFF)");
#endif
}

}  // namespace scored

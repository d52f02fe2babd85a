// A kernel that traps. Contract: device_trap.h.
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_trap.h"

namespace scored::kernels {
namespace {

__global__ void DeviceTrapKernel() { __trap(); }

}  // namespace

absl::Status DeviceTrap(cudaStream_t stream) {
  DeviceTrapKernel<<<1, 1, 0, stream>>>();
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

}  // namespace scored::kernels

// Testing only: a kernel that executes the trap instruction, a real device-side failure. The launch itself
// succeeds; the failure surfaces asynchronously as cudaErrorLaunchFailure, which is sticky: the CUDA context
// is unusable afterwards and every later call in the process fails (a process that calls this must end).
// The engine issues it before a forward when EngineOptions::fault_device_trap_after_batches says so, so the
// path a real GPU failure takes (sticky status, health NOT_SERVING, non-zero exit) runs end to end.
// Errors: INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_DEVICE_TRAP_H_
#define SCORED_ENGINE_KERNELS_DEVICE_TRAP_H_

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

absl::Status DeviceTrap(cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_DEVICE_TRAP_H_

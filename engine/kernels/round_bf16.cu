// Rounding an fp32 matrix to bf16 values. Contract: round_bf16.h.
#include <cuda_bf16.h>

#include <cstdint>

#include "engine/kernels/cuda_check.h"
#include "engine/kernels/round_bf16.h"

namespace scored::kernels {
namespace {

__global__ void RoundKernel(float* x, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
  }
}

}  // namespace

absl::Status RoundToBf16InPlace(float* x, int64_t n, cudaStream_t stream) {
  if (n < 0 || (n > 0 && x == nullptr))
    return absl::InvalidArgumentError("RoundToBf16InPlace: bad arguments");
  if (n == 0) return absl::OkStatus();
  const int64_t blocks = (n + 255) / 256 < 65535 ? (n + 255) / 256 : 65535;
  RoundKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(x, n);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

}  // namespace scored::kernels

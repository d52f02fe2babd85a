// Logit soft-capping. Contract: soft_cap.h. Memory-bound (one read and one write of each logit); a resident
// wave of blocks strides over the flat [rows x cols] index space.
#include <cmath>

#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/soft_cap.h"

namespace scored::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    SoftCapKernel(float* x, int64_t cols, int64_t ld, int64_t n, float cap) {  // n = rows * cols
  for (int64_t k = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = k / cols;
    float* v = x + r * ld + (k - r * cols);
    *v = __fmul_rn(tanhf(__fdiv_rn(*v, cap)), cap);
  }
}

}  // namespace

absl::Status SoftCap(float* x, int64_t rows, int64_t cols, int64_t ld, float cap, cudaStream_t stream) {
  if (rows < 0 || cols < 0 || ld < cols || !(cap > 0.0f) || !std::isfinite(cap)) {
    return absl::InvalidArgumentError("SoftCap: need rows, cols >= 0, ld >= cols and a finite cap > 0");
  }
  if (rows == 0 || cols == 0) return absl::OkStatus();
  if (x == nullptr) return absl::InvalidArgumentError("SoftCap: null pointer");
  unsigned blocks = 1;
  SCORED_CUDA_CHECK(ResidentGrid(SoftCapKernel, kThreads, CeilDiv(rows * cols, kThreads), &blocks));
  SoftCapKernel<<<blocks, kThreads, 0, stream>>>(x, cols, ld, rows * cols, cap);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

}  // namespace scored::kernels

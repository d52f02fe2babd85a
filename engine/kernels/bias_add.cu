// Bias add in place. Contract: bias_add.h.
//
// A 2-D grid: blockIdx.y strides over tokens, x-blocks and threads over the columns.
#include "engine/kernels/bias_add.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"

namespace scored::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocksY = 65535;
constexpr int64_t kMaxBlocksX = 1024;

template <typename T>
__global__ void __launch_bounds__(kThreads) BiasAddKernel(T* x,  // [num_tokens, token_stride]
                                                          int64_t token_stride,
                                                          const float* __restrict__ bias,  // [width]
                                                          int64_t num_tokens, int64_t width) {
  for (int64_t t = blockIdx.y; t < num_tokens; t += gridDim.y) {
    T* row = x + t * token_stride;
    for (int64_t j = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; j < width;
         j += static_cast<int64_t>(gridDim.x) * kThreads) {
      StoreFromFloat(row + j, LoadAsFloat(row + j) + bias[j]);
    }
  }
}

}  // namespace

template <typename T>
absl::Status BiasAdd(T* x, int64_t token_stride, const float* bias, int64_t num_tokens, int64_t width,
                     cudaStream_t stream) {
  if (num_tokens < 0 || width < 0 || token_stride < width) {
    return absl::InvalidArgumentError("BiasAdd: need num_tokens, width >= 0 and token_stride >= width");
  }
  if (num_tokens == 0 || width == 0) return absl::OkStatus();
  if (x == nullptr || bias == nullptr) return absl::InvalidArgumentError("BiasAdd: null pointer");
  const int64_t bx = CeilDiv(width, kThreads);
  const dim3 grid(static_cast<unsigned>(bx < kMaxBlocksX ? bx : kMaxBlocksX),
                  static_cast<unsigned>(num_tokens < kMaxBlocksY ? num_tokens : kMaxBlocksY));
  BiasAddKernel<<<grid, kThreads, 0, stream>>>(ToDevice(x), token_stride, bias, num_tokens, width);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status BiasAdd<float>(float*, int64_t, const float*, int64_t, int64_t, cudaStream_t);
template absl::Status BiasAdd<bf16_t>(bf16_t*, int64_t, const float*, int64_t, int64_t, cudaStream_t);

}  // namespace scored::kernels

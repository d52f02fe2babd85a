// The attention output gate, in place. Contract: sigmoid_gate.h.
//
// A 2-D grid as bias_add.cu's: blockIdx.y strides over tokens, x-blocks and threads over the columns.
// Predicted time: memory-bound, 3 x rows x width x sizeof(T) bytes at ~4 TB/s (Qwen3.5-27B's 6144-wide
// output, 8192 bf16 rows: 0.3 GB, ~0.08 ms); the double exp is hidden behind the loads at these sizes.
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/sigmoid_gate.h"

namespace scored::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocksY = 65535;
constexpr int64_t kMaxBlocksX = 1024;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    SigmoidGateKernel(T* x, int64_t x_stride, const T* __restrict__ gate, int64_t gate_stride,
                      int64_t num_tokens, int64_t width) {
  for (int64_t t = blockIdx.y; t < num_tokens; t += gridDim.y) {
    T* row = x + t * x_stride;
    const T* g = gate + t * gate_stride;
    for (int64_t j = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; j < width;
         j += static_cast<int64_t>(gridDim.x) * kThreads) {
      const float s = static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(LoadAsFloat(g + j)))));
      StoreFromFloat(row + j, __fmul_rn(LoadAsFloat(row + j), s));
    }
  }
}

}  // namespace

template <typename T>
absl::Status SigmoidGateMul(T* x, int64_t x_stride, const T* gate, int64_t gate_stride, int64_t num_tokens,
                            int64_t width, cudaStream_t stream) {
  if (num_tokens < 0 || width < 0 || x_stride < width || gate_stride < width) {
    return absl::InvalidArgumentError("SigmoidGateMul: need num_tokens, width >= 0 and strides >= width");
  }
  if (num_tokens == 0 || width == 0) return absl::OkStatus();
  if (x == nullptr || gate == nullptr) return absl::InvalidArgumentError("SigmoidGateMul: null pointer");
  const int64_t bx = CeilDiv(width, kThreads);
  const dim3 grid(static_cast<unsigned>(bx < kMaxBlocksX ? bx : kMaxBlocksX),
                  static_cast<unsigned>(num_tokens < kMaxBlocksY ? num_tokens : kMaxBlocksY));
  SigmoidGateKernel<<<grid, kThreads, 0, stream>>>(ToDevice(x), x_stride, ToDevice(gate), gate_stride,
                                                   num_tokens, width);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status SigmoidGateMul<float>(float*, int64_t, const float*, int64_t, int64_t, int64_t,
                                            cudaStream_t);
template absl::Status SigmoidGateMul<bf16_t>(bf16_t*, int64_t, const bf16_t*, int64_t, int64_t, int64_t,
                                             cudaStream_t);

}  // namespace scored::kernels

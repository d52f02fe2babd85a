// SwiGLU gate. Contract: swiglu.h.
//
// A 2-D grid: blockIdx.y strides over tokens, x-blocks and threads over the intermediate dimension.
// Elementwise and memory-bound: each input read once, each output written once.
#include "engine/kernels/swiglu.h"

#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"

namespace scored::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocksY = 65535;
constexpr int64_t kMaxBlocksX = 1024;

template <typename T>
__global__ void __launch_bounds__(kThreads) SwiGluKernel(const T* gate,  // [num_tokens, in_stride]
                                                         const T* up,    // [num_tokens, in_stride]
                                                         int64_t in_stride, int64_t num_tokens,
                                                         int64_t intermediate_size,
                                                         T* out) {       // [num_tokens, intermediate_size]
  for (int64_t t = blockIdx.y; t < num_tokens; t += gridDim.y) {
    const T* g_row = gate + t * in_stride;
    const T* u_row = up + t * in_stride;
    T* o_row = out + t * intermediate_size;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < intermediate_size;
         i += static_cast<int64_t>(gridDim.x) * kThreads) {
      const float g = LoadAsFloat(g_row + i);
      const float u = LoadAsFloat(u_row + i);
      // silu(g) * u, in the reference's order: g / (1 + exp(-g)), then times u; no FMA contraction.
      const float silu = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
      StoreFromFloat(o_row + i, __fmul_rn(silu, u));
    }
  }
}

}  // namespace

template <typename T>
absl::Status SwiGlu(const T* gate, const T* up, int64_t in_stride, int64_t num_tokens,
                    int64_t intermediate_size, T* out, cudaStream_t stream) {
  if (num_tokens < 0 || intermediate_size < 0 || in_stride < intermediate_size) {
    return absl::InvalidArgumentError("SwiGlu: need num_tokens, intermediate_size >= 0, in_stride >= intermediate_size");
  }
  if (num_tokens == 0 || intermediate_size == 0) return absl::OkStatus();
  if (gate == nullptr || up == nullptr || out == nullptr) return absl::InvalidArgumentError("SwiGlu: null pointer");
  const int64_t bx = CeilDiv(intermediate_size, kThreads);
  const dim3 grid(static_cast<unsigned>(bx < kMaxBlocksX ? bx : kMaxBlocksX),
                  static_cast<unsigned>(num_tokens < kMaxBlocksY ? num_tokens : kMaxBlocksY));
  SwiGluKernel<<<grid, kThreads, 0, stream>>>(ToDevice(gate), ToDevice(up), in_stride, num_tokens,
                                              intermediate_size, ToDevice(out));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status SwiGlu<float>(const float*, const float*, int64_t, int64_t, int64_t, float*, cudaStream_t);
template absl::Status SwiGlu<bf16_t>(const bf16_t*, const bf16_t*, int64_t, int64_t, int64_t, bf16_t*,
                                     cudaStream_t);

}  // namespace scored::kernels

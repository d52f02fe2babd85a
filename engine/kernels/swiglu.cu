// SwiGLU gate. Contract: swiglu.h.
//
// Elementwise and memory-bound: each input read once, each output written once.
// Vector path (rows of whole 16-byte vectors, 16-byte aligned pointers and strides; the engine's fused
// gate|up buffer qualifies): one resident wave of blocks (SM count x occupancy) strides over rows, each thread moves 16 bytes
// of gate and of up per step. Scalar path otherwise: a 2-D grid, blockIdx.y over tokens, x-blocks and
// threads over the intermediate dimension. Both compute each element with the same operations, so their
// results are identical.
#include "engine/kernels/swiglu.h"

#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"

namespace scored::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocksY = 65535;
constexpr int64_t kMaxBlocksX = 1024;
constexpr int kUnroll = 2;

// silu(g) * u, in the reference's order: g / (1 + exp(-g)), then times u; no FMA contraction.
__device__ __forceinline__ float SwiGluValue(float g, float u) {
  const float silu = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
  return __fmul_rn(silu, u);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) SwiGluVecKernel(const T* gate,  // [num_tokens, in_stride]
                                                            const T* up,    // [num_tokens, in_stride]
                                                            int64_t in_stride, int64_t num_tokens,
                                                            int64_t intermediate_size,
                                                            T* out) {       // [num_tokens, intermediate_size]
  constexpr int kVec = Vec16<T>::kSize;
  const int64_t vecs = intermediate_size / kVec;
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    const T* g_row = gate + t * in_stride;
    const T* u_row = up + t * in_stride;
    T* o_row = out + t * intermediate_size;
    // kUnroll vectors per step, all loads issued before the first store (the stores of one step never
    // touch the elements its loads read, so this holds in place too).
    for (int64_t c0 = threadIdx.x; c0 < vecs; c0 += kUnroll * kThreads) {
      float g[kUnroll][kVec], u[kUnroll][kVec];
#pragma unroll
      for (int r = 0; r < kUnroll; ++r) {
        const int64_t c = c0 + r * kThreads;
        if (c < vecs) {
          Load16(g_row + c * kVec, g[r]);
          Load16(u_row + c * kVec, u[r]);
        }
      }
#pragma unroll
      for (int r = 0; r < kUnroll; ++r) {
        const int64_t c = c0 + r * kThreads;
        if (c < vecs) {
          float o[kVec];
#pragma unroll
          for (int j = 0; j < kVec; ++j) o[j] = SwiGluValue(g[r][j], u[r][j]);
          Store16(o_row + c * kVec, o);
        }
      }
    }
  }
}

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
      StoreFromFloat(o_row + i, SwiGluValue(LoadAsFloat(g_row + i), LoadAsFloat(u_row + i)));
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
  constexpr int kVec = Vec16<T>::kSize;
  if (intermediate_size % kVec == 0 && in_stride % kVec == 0 && IsAligned(gate, 16) && IsAligned(up, 16) &&
      IsAligned(out, 16)) {
    // One resident wave; each thread keeps 4 x 16 bytes of loads in flight.
    unsigned blocks = 1;
    SCORED_CUDA_CHECK(ResidentGrid(SwiGluVecKernel<typename DeviceType<T>::type>, kThreads, num_tokens, &blocks));
    SwiGluVecKernel<<<blocks, kThreads, 0, stream>>>(
        ToDevice(gate), ToDevice(up), in_stride, num_tokens, intermediate_size, ToDevice(out));
    SCORED_CUDA_CHECK_LAUNCH();
    return absl::OkStatus();
  }
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

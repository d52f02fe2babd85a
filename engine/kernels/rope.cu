// Rotary position embedding, in place. Contract: rope.h.
// fp32 results equal ref::Rope bit for bit (same cos/sin rounding, same operation order, no FMA).
//
// One block per token; each thread owns pairs (h, i) and rotates (x[i], x[i + half]). cos/sin are
// computed once per (token, i) into shared memory and reused by every head.
#include "engine/kernels/rope.h"

#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"

namespace scored::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int64_t kMaxBlocks = 65535;
constexpr int64_t kMaxHalfDim = 512;

template <typename T>
__global__ void __launch_bounds__(kThreads) RopeKernel(T* x,  // [num_tokens, token_stride]
                                                       int64_t token_stride,
                                                       const int32_t* __restrict__ positions,  // [num_tokens]
                                                       const float* __restrict__ inv_freq,     // [half]
                                                       int64_t num_tokens, int64_t num_heads, int64_t half) {
  __shared__ float cos_s[kMaxHalfDim];
  __shared__ float sin_s[kMaxHalfDim];
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    const float pos = static_cast<float>(positions[t]);
    for (int64_t i = threadIdx.x; i < half; i += kThreads) {
      const float angle = __fmul_rn(pos, inv_freq[i]);
      // sin/cos in double, rounded once: the correctly rounded fp32 value (as ref::Rope), at a cost of
      // num_tokens * head_dim / 2 double evaluations per call.
      double s, c;
      sincos(static_cast<double>(angle), &s, &c);
      sin_s[i] = static_cast<float>(s);
      cos_s[i] = static_cast<float>(c);
    }
    __syncthreads();
    T* row = x + t * token_stride;
    const int64_t pairs = num_heads * half;
    for (int64_t p = threadIdx.x; p < pairs; p += kThreads) {
      const int64_t h = p / half;
      const int64_t i = p - h * half;
      T* v = row + h * 2 * half;
      const float a = LoadAsFloat(v + i);
      const float b = LoadAsFloat(v + i + half);
      const float c = cos_s[i], s = sin_s[i];
      // Explicit _rn operations: no fused multiply-add, so fp32 results match the reference's order.
      StoreFromFloat(v + i, __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
      StoreFromFloat(v + i + half, __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)));
    }
    __syncthreads();
  }
}

}  // namespace

template <typename T>
absl::Status Rope(T* x, int64_t token_stride, const int32_t* positions, const float* inv_freq,
                  int64_t num_tokens, int64_t num_heads, int64_t head_dim, cudaStream_t stream) {
  if (num_tokens < 0 || num_heads < 0 || head_dim < 2 || head_dim % 2 != 0 || head_dim / 2 > kMaxHalfDim) {
    return absl::InvalidArgumentError("Rope: need num_tokens, num_heads >= 0 and an even head_dim in [2, 1024]");
  }
  if (token_stride < num_heads * head_dim) {
    return absl::InvalidArgumentError("Rope: token_stride < num_heads * head_dim");
  }
  if (num_tokens == 0 || num_heads == 0) return absl::OkStatus();
  if (x == nullptr || positions == nullptr || inv_freq == nullptr) {
    return absl::InvalidArgumentError("Rope: null pointer");
  }
  const int64_t blocks = num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks;
  RopeKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(ToDevice(x), token_stride, positions,
                                                                      inv_freq, num_tokens, num_heads,
                                                                      head_dim / 2);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status Rope<float>(float*, int64_t, const int32_t*, const float*, int64_t, int64_t, int64_t,
                                  cudaStream_t);
template absl::Status Rope<bf16_t>(bf16_t*, int64_t, const int32_t*, const float*, int64_t, int64_t, int64_t,
                                   cudaStream_t);

}  // namespace scored::kernels

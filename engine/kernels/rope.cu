// Rotary position embedding, in place. Contract: rope.h.
// fp32 results equal ref::Rope bit for bit (same cos/sin rounding, same operation order, no FMA).
//
// Vector path (half a multiple of the 16-byte vector, token_stride too, x 16-byte aligned; the engine's
// fused QKV buffer qualifies): one resident wave of blocks (SM count x occupancy) strides over tokens. For each token a
// thread owns up to kUnroll chunks (h, i0 .. i0 + kVec - 1) and issues all of their 16-byte loads
// (x[i0..] and x[i0 + half..]) first; then threads < half compute cos/sin into shared memory while the
// loads are in flight; after a barrier the chunks are rotated and stored.
// Scalar path otherwise: one block per token; each thread owns pairs (h, i) and rotates
// (x[i], x[i + half]). Either way cos/sin are computed once per (token, i) into shared memory and reused
// by every head, and every element sees the same operations, so both paths give identical results.
#include "engine/kernels/rope.h"

#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"

namespace scored::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int64_t kMaxBlocks = 65535;
constexpr int64_t kMaxHalfDim = 512;

constexpr int kVecThreads = 128;
constexpr int kUnroll = 4;  // chunks per thread per pass: 40 heads x 64 pairs / 8 = 320 < 4 * 128

__device__ __forceinline__ void CosSin(float pos, float inv_freq, float* c, float* s) {
  const float angle = __fmul_rn(pos, inv_freq);
  // sin/cos in double, rounded once: the correctly rounded fp32 value (as ref::Rope), at a cost of
  // num_tokens * head_dim / 2 double evaluations per call.
  double sd, cd;
  sincos(static_cast<double>(angle), &sd, &cd);
  *s = static_cast<float>(sd);
  *c = static_cast<float>(cd);
}

template <typename T>
__global__ void __launch_bounds__(kVecThreads) RopeVecKernel(T* x,  // [num_tokens, token_stride]
                                                             int64_t token_stride,
                                                             const int32_t* __restrict__ positions,  // [num_tokens]
                                                             const float* __restrict__ inv_freq,     // [half]
                                                             int64_t num_tokens, int64_t num_heads, int64_t half) {
  constexpr int kVec = Vec16<T>::kSize;
  __shared__ float cos_s[kMaxHalfDim];
  __shared__ float sin_s[kMaxHalfDim];
  const int chunks_per_head = static_cast<int>(half / kVec);
  const int chunks = static_cast<int>(num_heads) * chunks_per_head;
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    T* row = x + t * token_stride;
    for (int c0 = 0; c0 < chunks; c0 += kUnroll * kVecThreads) {
      float a[kUnroll][kVec], b[kUnroll][kVec];
      T* base[kUnroll];
      int i0[kUnroll];
#pragma unroll
      for (int r = 0; r < kUnroll; ++r) {
        const int c = c0 + r * kVecThreads + static_cast<int>(threadIdx.x);
        base[r] = nullptr;
        i0[r] = 0;
        if (c < chunks) {
          const int h = c / chunks_per_head;
          i0[r] = (c - h * chunks_per_head) * kVec;
          base[r] = row + static_cast<int64_t>(h) * 2 * half + i0[r];
          Load16(base[r], a[r]);
          Load16(base[r] + half, b[r]);
        }
      }
      if (c0 == 0) {
        const float pos = static_cast<float>(positions[t]);
        for (int64_t i = threadIdx.x; i < half; i += kVecThreads) CosSin(pos, inv_freq[i], &cos_s[i], &sin_s[i]);
        __syncthreads();
      }
#pragma unroll
      for (int r = 0; r < kUnroll; ++r) {
        if (base[r] != nullptr) {
          float lo[kVec], hi[kVec];
#pragma unroll
          for (int j = 0; j < kVec; ++j) {
            const float c = cos_s[i0[r] + j], s = sin_s[i0[r] + j];
            // Explicit _rn operations: no fused multiply-add, so fp32 results match the reference's order.
            lo[j] = __fsub_rn(__fmul_rn(a[r][j], c), __fmul_rn(b[r][j], s));
            hi[j] = __fadd_rn(__fmul_rn(b[r][j], c), __fmul_rn(a[r][j], s));
          }
          Store16(base[r], lo);
          Store16(base[r] + half, hi);
        }
      }
    }
    __syncthreads();  // cos_s / sin_s are rewritten for the next token
  }
}

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
    for (int64_t i = threadIdx.x; i < half; i += kThreads) CosSin(pos, inv_freq[i], &cos_s[i], &sin_s[i]);
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
  const int64_t half = head_dim / 2;
  constexpr int kVec = Vec16<T>::kSize;
  if (half % kVec == 0 && token_stride % kVec == 0 && IsAligned(x, 16) && num_heads * half / kVec <= (1 << 30)) {
    unsigned blocks = 1;
    SCORED_CUDA_CHECK(ResidentGrid(RopeVecKernel<typename DeviceType<T>::type>, kVecThreads, num_tokens, &blocks));
    RopeVecKernel<<<blocks, kVecThreads, 0, stream>>>(ToDevice(x), token_stride, positions,
                                                                              inv_freq, num_tokens, num_heads, half);
    SCORED_CUDA_CHECK_LAUNCH();
    return absl::OkStatus();
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

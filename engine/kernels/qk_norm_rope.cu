// Per-head q / k RMSNorm and RoPE in one pass. Contract: qk_norm_rope.h.
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/qk_norm_rope.h"

namespace scored::kernels {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kItems = 2;  // (token, head) items a warp loads before it computes any
constexpr int64_t kMaxBlocks = 65535 * 16;

// v rounded as StoreFromFloat stores it and LoadAsFloat reads it back.
__device__ __forceinline__ float AsStored(float v, const float*) { return v; }
__device__ __forceinline__ float AsStored(float v, const __nv_bfloat16*) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

// kPer = head_dim / 32 elements a lane: l + 32 j, j < kPer; the pair of j < kPer / 2 is j + kPer / 2.
template <typename T, int kPer>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    QkNormRopeKernel(T* x, int64_t token_stride, const float* __restrict__ q_weight,
                     const float* __restrict__ k_weight, const int32_t* __restrict__ positions,
                     const float* __restrict__ table, int64_t num_positions, int64_t num_tokens,
                     int64_t num_heads, int64_t all_heads, float eps) {
  constexpr int kHalf = kPer / 2;
  constexpr int64_t kHeadDim = 32 * kPer, kHalfDim = 16 * kPer;
  const int lane = threadIdx.x & 31;
  const int64_t total = num_tokens * all_heads;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock * kItems;
  for (int64_t w0 = (blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + (threadIdx.x >> 5)) * kItems;
       w0 < total; w0 += step) {
    float a[kItems][kPer];
#pragma unroll
    for (int r = 0; r < kItems; ++r) {
      if (w0 + r >= total) continue;
      const int64_t t = (w0 + r) / all_heads, h = (w0 + r) - t * all_heads;
      const T* v = x + t * token_stride + h * kHeadDim;
#pragma unroll
      for (int j = 0; j < kPer; ++j) a[r][j] = LoadAsFloat(v + lane + 32 * j);
    }
#pragma unroll
    for (int r = 0; r < kItems; ++r) {
      if (w0 + r >= total) continue;  // warp-uniform
      const int64_t t = (w0 + r) / all_heads, h = (w0 + r) - t * all_heads;
      T* v = x + t * token_stride + h * kHeadDim;
      // QkNorm: this lane's squares in its elements' order, the warp tree, the same scale expression
      float sum_sq = 0.0f;
#pragma unroll
      for (int j = 0; j < kPer; ++j) sum_sq += a[r][j] * a[r][j];
      sum_sq = WarpSum(sum_sq);
      const float inv_rms = rsqrtf(sum_sq / static_cast<float>(kHeadDim) + eps);
      const float* weight = h < num_heads ? q_weight : k_weight;
      float y[kPer];
#pragma unroll
      for (int j = 0; j < kPer; ++j) y[j] = AsStored(a[r][j] * inv_rms * weight[lane + 32 * j], v);
      // RopeWithTable: the same _rn rotation of each pair (i, i + half)
      const int32_t position = positions[t];
      const bool valid = position >= 0 && static_cast<int64_t>(position) < num_positions;
#pragma unroll
      for (int j = 0; j < kHalf; ++j) {
        const int64_t i = lane + 32 * j;
        float lo = __int_as_float(0x7fffffff), hi = __int_as_float(0x7fffffff);
        if (valid) {
          const float2 cs = __ldg(reinterpret_cast<const float2*>(table) + position * kHalfDim + i);
          lo = __fsub_rn(__fmul_rn(y[j], cs.x), __fmul_rn(y[j + kHalf], cs.y));
          hi = __fadd_rn(__fmul_rn(y[j + kHalf], cs.x), __fmul_rn(y[j], cs.y));
        }
        StoreFromFloat(v + i, lo);
        StoreFromFloat(v + i + kHalfDim, hi);
      }
    }
  }
}

template <typename D, int kPer>
void Launch(D* x, int64_t token_stride, const float* q_weight, const float* k_weight,
            const int32_t* positions, const float* table, int64_t num_positions, int64_t num_tokens,
            int64_t num_heads, int64_t all_heads, float eps, cudaStream_t stream) {
  const int64_t blocks = CeilDiv(num_tokens * all_heads, int64_t{kWarpsPerBlock} * kItems);
  QkNormRopeKernel<D, kPer>
      <<<static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks), kWarpsPerBlock * 32, 0, stream>>>(
          x, token_stride, q_weight, k_weight, positions, table, num_positions, num_tokens, num_heads,
          all_heads, eps);
}

}  // namespace

bool QkNormRopeSupports(int64_t head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

template <typename T>
absl::Status QkNormRope(T* x, int64_t token_stride, const float* q_weight, const float* k_weight,
                        const int32_t* positions, const float* table, int64_t num_positions,
                        int64_t num_tokens, int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
                        float eps, cudaStream_t stream) {
  if (num_tokens < 0 || num_heads < 0 || num_kv_heads < 0 || num_positions < 0 ||
      !QkNormRopeSupports(head_dim) || token_stride < (num_heads + num_kv_heads) * head_dim) {
    return absl::InvalidArgumentError(
        "QkNormRope: need num_tokens, heads, num_positions >= 0, head_dim 64, 128 or 256 and token_stride >= "
        "(num_heads + num_kv_heads) * head_dim");
  }
  if (num_tokens == 0 || num_heads + num_kv_heads == 0) return absl::OkStatus();
  if (x == nullptr || q_weight == nullptr || k_weight == nullptr || positions == nullptr ||
      table == nullptr) {
    return absl::InvalidArgumentError("QkNormRope: null pointer");
  }
  const int64_t all_heads = num_heads + num_kv_heads;
  using D = typename DeviceType<T>::type;
  const auto launch = head_dim == 64 ? Launch<D, 2> : head_dim == 128 ? Launch<D, 4> : Launch<D, 8>;
  launch(ToDevice(x), token_stride, q_weight, k_weight, positions, table, num_positions, num_tokens,
         num_heads, all_heads, eps, stream);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status QkNormRope<float>(float*, int64_t, const float*, const float*, const int32_t*,
                                        const float*, int64_t, int64_t, int64_t, int64_t, int64_t, float,
                                        cudaStream_t);
template absl::Status QkNormRope<bf16_t>(bf16_t*, int64_t, const float*, const float*, const int32_t*,
                                         const float*, int64_t, int64_t, int64_t, int64_t, int64_t, float,
                                         cudaStream_t);

}  // namespace scored::kernels

// Per-head RMSNorm in place (Qwen3). Contract: qk_norm.h.
//
// One warp per (token, head): lanes stride over head_dim, WarpSum combines the squares in a fixed order.
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/qk_norm.h"

namespace scored::kernels {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int64_t kMaxBlocks = 65535 * 16;

template <typename T>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    QkNormKernel(T* x,  // [num_tokens, token_stride]
                 int64_t token_stride,
                 const float* __restrict__ weight,  // [head_dim]
                 int64_t num_tokens, int64_t num_heads, int64_t head_dim, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t total = num_tokens * num_heads;
  for (int64_t w = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + (threadIdx.x >> 5); w < total;
       w += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const int64_t t = w / num_heads;
    const int64_t h = w - t * num_heads;
    T* v = x + t * token_stride + h * head_dim;
    float sum_sq = 0.0f;
    for (int64_t i = lane; i < head_dim; i += 32) {
      const float a = LoadAsFloat(v + i);
      sum_sq += a * a;
    }
    sum_sq = WarpSum(sum_sq);
    const float inv_rms = rsqrtf(sum_sq / static_cast<float>(head_dim) + eps);
    for (int64_t i = lane; i < head_dim; i += 32)
      StoreFromFloat(v + i, LoadAsFloat(v + i) * inv_rms * weight[i]);
  }
}

}  // namespace

template <typename T>
absl::Status QkNorm(T* x, int64_t token_stride, const float* weight, int64_t num_tokens, int64_t num_heads,
                    int64_t head_dim, float eps, cudaStream_t stream) {
  if (num_tokens < 0 || num_heads < 0 || head_dim < 1 || head_dim > 1024) {
    return absl::InvalidArgumentError("QkNorm: need num_tokens, num_heads >= 0 and head_dim in [1, 1024]");
  }
  if (token_stride < num_heads * head_dim)
    return absl::InvalidArgumentError("QkNorm: token_stride too small");
  if (num_tokens == 0 || num_heads == 0) return absl::OkStatus();
  if (x == nullptr || weight == nullptr) return absl::InvalidArgumentError("QkNorm: null pointer");
  const int64_t blocks = CeilDiv(num_tokens * num_heads, kWarpsPerBlock);
  QkNormKernel<<<static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks), kWarpsPerBlock * 32, 0,
                 stream>>>(ToDevice(x), token_stride, weight, num_tokens, num_heads, head_dim, eps);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status QkNorm<float>(float*, int64_t, const float*, int64_t, int64_t, int64_t, float,
                                    cudaStream_t);
template absl::Status QkNorm<bf16_t>(bf16_t*, int64_t, const float*, int64_t, int64_t, int64_t, float,
                                     cudaStream_t);

}  // namespace scored::kernels

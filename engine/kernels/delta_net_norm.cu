// Gated RMSNorm of the Gated DeltaNet's output per v head. Contract: delta_net_norm.h.
//
// One warp per (token, head) row, grid-stride: lanes stride over head_dim, WarpSum adds the double squares
// in a fixed order (it depends only on head_dim), then the lanes write their elements.
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/delta_net_norm.h"
#include "engine/kernels/device_util.cuh"

namespace scored::kernels {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int64_t kMaxBlocks = 65535 * 16;
constexpr int64_t kMaxHeadDim = 1024;

template <typename T>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    GatedRmsNormKernel(const float* x,           // [num_tokens, num_heads, head_dim]
                       const T* __restrict__ z,  // [num_tokens, z_stride]
                       int64_t z_stride,
                       const float* __restrict__ weight,  // [head_dim]
                       int64_t num_tokens, int64_t num_heads, int64_t head_dim, double eps,
                       T* out) {  // [num_tokens, num_heads * head_dim]
  const int lane = threadIdx.x & 31;
  const int64_t rows = num_tokens * num_heads;
  for (int64_t r = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + (threadIdx.x >> 5); r < rows;
       r += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const int64_t t = r / num_heads;
    const int64_t h = r - t * num_heads;
    const float* xr = x + r * head_dim;
    const T* zr = z + t * z_stride + h * head_dim;
    T* outr = out + r * head_dim;
    double sum = 0.0;
    for (int64_t i = lane; i < head_dim; i += 32) {
      const double a = xr[i];
      sum = __dadd_rn(sum, __dmul_rn(a, a));  // exact product
    }
    sum = WarpSum(sum);
    const float inv = static_cast<float>(
        __ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(__ddiv_rn(sum, static_cast<double>(head_dim)), eps))));
    for (int64_t i = lane; i < head_dim; i += 32) {
      const float normed = __fmul_rn(weight[i], __fmul_rn(xr[i], inv));
      const double zd = LoadAsFloat(zr + i);
      const float silu = static_cast<float>(__ddiv_rn(zd, __dadd_rn(1.0, exp(-zd))));
      StoreFromFloat(outr + i, __fmul_rn(normed, silu));
    }
  }
}

}  // namespace

template <typename T>
absl::Status DeltaNetGatedRmsNorm(const float* x, const T* z, int64_t z_stride, const float* weight,
                                  int64_t num_tokens, int64_t num_heads, int64_t head_dim, double eps, T* out,
                                  cudaStream_t stream) {
  if (num_tokens < 0 || num_heads < 0 || head_dim < 1 || head_dim > kMaxHeadDim) {
    return absl::InvalidArgumentError(
        "DeltaNetGatedRmsNorm: need num_tokens, num_heads >= 0 and head_dim in [1, 1024]");
  }
  if (z_stride < num_heads * head_dim)
    return absl::InvalidArgumentError("DeltaNetGatedRmsNorm: z_stride too small");
  if (!(eps > 0.0)) return absl::InvalidArgumentError("DeltaNetGatedRmsNorm: eps must be > 0");
  if (num_tokens == 0 || num_heads == 0) return absl::OkStatus();
  if (x == nullptr || z == nullptr || weight == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("DeltaNetGatedRmsNorm: null pointer");
  }
  const int64_t blocks = CeilDiv(num_tokens * num_heads, kWarpsPerBlock);
  GatedRmsNormKernel<<<static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks), kWarpsPerBlock * 32,
                       0, stream>>>(x, ToDevice(z), z_stride, weight, num_tokens, num_heads, head_dim, eps,
                                    ToDevice(out));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status DeltaNetGatedRmsNorm<float>(const float*, const float*, int64_t, const float*, int64_t,
                                                  int64_t, int64_t, double, float*, cudaStream_t);
template absl::Status DeltaNetGatedRmsNorm<bf16_t>(const float*, const bf16_t*, int64_t, const float*,
                                                   int64_t, int64_t, int64_t, double, bf16_t*, cudaStream_t);

}  // namespace scored::kernels

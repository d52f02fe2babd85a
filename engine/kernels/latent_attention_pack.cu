// The latent attention's q|k|v packing. Contract: latent_attention_pack.h.
//
// A 2-D grid as sigmoid_gate.cu's: blockIdx.y strides over tokens, x-blocks and threads over a packed row's
// 3 H D columns; each thread finds its column's source (or zero) and copies one element. Predicted time:
// memory-bound, the packed row written once and the inputs read once (DeepSeek-V3, 128 heads padded to
// D = 256 bf16: 196 KB written per token, ~0.4 ms for 8192 tokens at ~4 TB/s).
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/latent_attention_pack.h"

namespace scored::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocksY = 65535;
constexpr int64_t kMaxBlocksX = 1024;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    LatentPackKernel(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ kv, int64_t kv_stride,
                     const T* __restrict__ k_rope, int64_t k_rope_stride, int64_t num_tokens, int64_t heads,
                     int64_t nope, int64_t rope, int64_t vd, int64_t d, T* __restrict__ out) {
  const int64_t width = 3 * heads * d;
  for (int64_t t = blockIdx.y; t < num_tokens; t += gridDim.y) {
    const T* q_row = q + t * q_stride;
    const T* kv_row = kv + t * kv_stride;
    const T* rope_row = k_rope + t * k_rope_stride;
    T* out_row = out + t * width;
    for (int64_t c = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; c < width;
         c += static_cast<int64_t>(gridDim.x) * kThreads) {
      const int64_t part = c / (heads * d);  // 0: Q, 1: K, 2: V
      const int64_t h = (c / d) % heads, j = c % d;
      const T* src = nullptr;
      if (part == 0) {
        src = j < rope ? q_row + h * (nope + rope) + nope + j
                       : (j < rope + nope ? q_row + h * (nope + rope) + (j - rope) : nullptr);
      } else if (part == 1) {
        src = j < rope ? rope_row + j : (j < rope + nope ? kv_row + h * (nope + vd) + (j - rope) : nullptr);
      } else {
        src = j < vd ? kv_row + h * (nope + vd) + nope + j : nullptr;
      }
      out_row[c] = src != nullptr ? *src : T(0.0f);
    }
  }
}

}  // namespace

template <typename T>
absl::Status LatentAttentionPack(const T* q, int64_t q_stride, const T* kv, int64_t kv_stride,
                                 const T* k_rope, int64_t k_rope_stride, int64_t num_tokens,
                                 const LatentPackShape& shape, T* out, cudaStream_t stream) {
  const int64_t heads = shape.num_heads, nope = shape.qk_nope_head_dim, rope = shape.qk_rope_head_dim;
  const int64_t vd = shape.v_head_dim, d = shape.packed_head_dim;
  if (num_tokens < 0 || heads <= 0 || nope < 0 || rope < 0 || vd <= 0 || d < nope + rope || d < vd ||
      q_stride < heads * (nope + rope) || kv_stride < heads * (nope + vd) || k_rope_stride < rope) {
    return absl::InvalidArgumentError(
        "LatentAttentionPack: need heads, v_head_dim > 0, packed_head_dim >= qk_nope + qk_rope and >= "
        "v_head_dim, and strides at least their rows");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (q == nullptr || kv == nullptr || k_rope == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("LatentAttentionPack: null pointer");
  }
  const int64_t bx = CeilDiv(3 * heads * d, kThreads);
  const dim3 grid(static_cast<unsigned>(bx < kMaxBlocksX ? bx : kMaxBlocksX),
                  static_cast<unsigned>(num_tokens < kMaxBlocksY ? num_tokens : kMaxBlocksY));
  LatentPackKernel<<<grid, kThreads, 0, stream>>>(ToDevice(q), q_stride, ToDevice(kv), kv_stride,
                                                  ToDevice(k_rope), k_rope_stride, num_tokens, heads, nope,
                                                  rope, vd, d, ToDevice(out));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status LatentAttentionPack<float>(const float*, int64_t, const float*, int64_t, const float*,
                                                 int64_t, int64_t, const LatentPackShape&, float*,
                                                 cudaStream_t);
template absl::Status LatentAttentionPack<bf16_t>(const bf16_t*, int64_t, const bf16_t*, int64_t,
                                                  const bf16_t*, int64_t, int64_t, const LatentPackShape&,
                                                  bf16_t*, cudaStream_t);

}  // namespace scored::kernels

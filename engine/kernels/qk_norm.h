// Per-head RMSNorm (Qwen3 q_norm / k_norm, applied before RoPE), in place:
//   for token t, head h: v = x + t * token_stride + h * head_dim;
//   v[i] = T(v[i] * rsqrt(mean_i(v^2) + eps) * weight[i]), i < head_dim, fp32 math.
// The mean is a warp tree in fp32 in a fixed order (depends only on head_dim).
// x [num_tokens, token_stride], weight [head_dim] fp32. q and k use different weights: one call each
// (q: base = qkv, num_heads; k: base = qkv + num_heads * head_dim, num_kv_heads).
// dtypes: T in {bf16_t, float}. Limits: head_dim <= 1024.
// Errors: INVALID_ARGUMENT (shapes, null pointers), INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_QK_NORM_H_
#define SCORED_ENGINE_KERNELS_QK_NORM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

template <typename T>
absl::Status QkNorm(T* x,  // [num_tokens, token_stride], heads at [h * head_dim, ...)
                    int64_t token_stride,
                    const float* weight,  // [head_dim]
                    int64_t num_tokens, int64_t num_heads, int64_t head_dim, float eps, cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_QK_NORM_H_

// Qwen3's per-head q / k RMSNorm followed by RoPE from a cos/sin table, in one pass over the q and k heads of
// a fused QKV row, in place: bitwise the same as
//   QkNorm<T>(x, token_stride, q_weight, num_tokens, num_heads, head_dim, eps);
//   QkNorm<T>(x + num_heads * head_dim, token_stride, k_weight, num_tokens, num_kv_heads, head_dim, eps);
//   RopeWithTable<T>(x, token_stride, positions, table, num_positions, num_tokens, num_heads + num_kv_heads,
//                    head_dim);
// (qk_norm.h, rope.h: the same fp32 operations in the same order, each lane's squares summed over the same
// elements before the same warp tree, the normed value rounded to T before its rotation as the separate
// kernels store and reload it; a position outside [0, num_positions) gives NaN like RopeWithTable). One read
// and one write of q|k where the three kernels make three of each (and QkNorm reads its head twice).
//   x [num_tokens, token_stride]: q heads at [h * head_dim, ...), h < num_heads, the k heads right after.
// A warp per (token, head), kItems of them at once; lane l holds elements l, l + 32, ... of its head, so the
// rotation's pairs (i, i + head_dim / 2) are in one lane.
// dtypes: T in {bf16_t, float}. Limits (QkNormRopeSupports): head_dim 64, 128 or 256 (every element rotated:
// not partial rotary); token_stride >= (num_heads + num_kv_heads) * head_dim.
// Errors: INVALID_ARGUMENT (shapes, null pointers), INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_QK_NORM_ROPE_H_
#define SCORED_ENGINE_KERNELS_QK_NORM_ROPE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

// Whether QkNormRope takes heads of head_dim elements. Host-only.
bool QkNormRopeSupports(int64_t head_dim);

template <typename T>
absl::Status QkNormRope(T* x,  // [num_tokens, token_stride]
                        int64_t token_stride,
                        const float* q_weight,     // [head_dim]
                        const float* k_weight,     // [head_dim]
                        const int32_t* positions,  // [num_tokens]
                        const float* table,        // [num_positions, head_dim / 2, 2] (RopeCosSinTable)
                        int64_t num_positions, int64_t num_tokens, int64_t num_heads, int64_t num_kv_heads,
                        int64_t head_dim, float eps, cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_QK_NORM_ROPE_H_

// Rotary position embedding, HF "rotate_half" convention, applied in place.
//
// For token t, head h < num_heads, i < head_dim/2, with x = base + t * token_stride + h * head_dim:
//   angle = fp32(positions[t] * inv_freq[i]);  c = fp32(cos(double(angle))), s likewise
//   (x[i], x[i + head_dim/2]) <- (x[i] c - x[i + head_dim/2] s,  x[i + head_dim/2] c + x[i] s)
// in fp32, rounded once to T. inv_freq [head_dim/2] fp32 in device memory is computed on the host exactly
// like ref::RopeInvFreq (default / linear / llama3 scaling all live in the table).
// q and k of a fused QKV GEMM output [num_tokens, (num_heads + 2 num_kv_heads) * head_dim] are rotated by
// ONE call: base = qkv, num_heads = num_heads + num_kv_heads, token_stride = (nh + 2 nkv) * head_dim.
// positions [num_tokens] int32: position of each token within its own window (varlen batches restart at 0).
// dtypes: T in {bf16_t, float}. Limits: head_dim even, token_stride >= num_heads * head_dim.
// Errors: INVALID_ARGUMENT (shapes, null pointers), INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_ROPE_H_
#define SCORED_ENGINE_KERNELS_ROPE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

template <typename T>
absl::Status Rope(T* x,                      // [num_tokens, token_stride], heads at [h * head_dim, ...)
                  int64_t token_stride,
                  const int32_t* positions,  // [num_tokens]
                  const float* inv_freq,     // [head_dim / 2]
                  int64_t num_tokens, int64_t num_heads, int64_t head_dim, cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_ROPE_H_

// Qwen3.5 Gated DeltaNet, step 4 of the token mixer: the gated RMSNorm of the rule's output per v head
// (Qwen3_5RMSNormGated: a plain weight, the gate's SiLU applied after the norm), written as out_proj's input.
//
// For token t, v head h < num_heads, i < head_dim, with x_r = x + (t * num_heads + h) * head_dim and
// z_r = z + t * z_stride + h * head_dim:
//   r = fp32(1 / sqrt(sum_i x_r[i]^2 / head_dim + eps))                      (sum, mean and root in double)
//   out[t * num_heads * head_dim + h * head_dim + i] =
//       T(fp32(fp32(weight[i] * fp32(x_r[i] * r)) * fp32(silu(z_r[i]))))     (silu in double, rounded once)
// i.e. ref::GatedRmsNorm (engine/reference/ops.h) over the [num_tokens * num_heads, head_dim] rows, in
// transformers' order (normalized x, times the weight, times silu(z)). Numerics: the products of fp32
// values are exact in double and only the order of the double sum differs, so r is the oracle's except
// where that rounding crosses an fp32 boundary (very rare); the fp32 products use _rn intrinsics (no FMA
// contraction), so fp32 outputs equal the oracle's but for such rare 1-ulp cases, and bf16 outputs are one
// RNE rounding of them.
//
// Shapes (elements): x [num_tokens, num_heads, head_dim] fp32, contiguous (the rule's output,
// delta_net_rule.h); z [num_tokens, z_stride] of T with head h at columns [h * head_dim, ...) (in_proj_z's
// output, z_stride >= num_heads * head_dim); weight [head_dim] fp32; out [num_tokens, num_heads * head_dim]
// of T, contiguous. eps > 0 is the config's rms_norm_eps as a double (the oracle adds it in double).
// Not in place: out must not overlap z, and may overlap x only when it is x itself with T = float (each
// element is read by the thread that writes it, before it writes it).
// dtypes: T in {bf16_t, float} (z and out). Limits: head_dim in [1, 1024].
// Errors: INVALID_ARGUMENT (shapes, eps, null pointers), INTERNAL (launch). Asynchronous on `stream`.
//
// Predicted time (memory-bound; one warp per row, x re-read from L1): x 4 bytes, z and out sizeof(T) each
// per element, one double exp and division per element. Qwen3.5-27B (48 x 128) at 8192 tokens, bf16:
// 0.2 GB, ~50 us at 4.15 TB/s.
#ifndef SCORED_ENGINE_KERNELS_DELTA_NET_NORM_H_
#define SCORED_ENGINE_KERNELS_DELTA_NET_NORM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

template <typename T>
absl::Status DeltaNetGatedRmsNorm(const float* x,  // [num_tokens, num_heads, head_dim]
                                  const T* z,      // [num_tokens, z_stride], head h at [h head_dim, ...)
                                  int64_t z_stride,
                                  const float* weight,  // [head_dim]
                                  int64_t num_tokens, int64_t num_heads, int64_t head_dim, double eps,
                                  T* out,  // [num_tokens, num_heads * head_dim]
                                  cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_DELTA_NET_NORM_H_

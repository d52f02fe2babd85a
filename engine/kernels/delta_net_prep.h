// Qwen3.5 Gated DeltaNet, step 2 of the token mixer: the per-token preparation of the gated delta rule's
// inputs, in one launch (transformers' Qwen3_5GatedDeltaNet.forward between the conv and the rule; the same
// arithmetic as ReferenceEngine::DeltaNetBlock).
//
// For token t, k head kh < num_k_heads, i < k_dim, with q = qkv + t * qkv_stride + kh * k_dim and
// k = q + num_k_heads * k_dim (the conv output's q | k | v columns; v is neither read nor written):
//   k[i] = fp32(k[i] * r_k),  r_k = 1 / sqrt(sum_i k[i]^2 + 1e-6)                  (sum and root in double)
//   q[i] = fp32(fp32(q[i] * r_q) / q_scale),  q_scale = fp32(sqrt(k_dim))        (fp32 IEEE division)
// (transformers' l2norm, eps 1e-6: a sum, not a mean; then query * k_dim^-0.5, which the oracle writes as a
// division by fp32(sqrt(k_dim)): exact for k_dim 16 / 64 / 256, and the reference's value otherwise.)
// For v head h < num_v_heads:
//   beta[t, h] = fp32(1 / (1 + exp(-double(b[t, h]))))                                     (sigmoid)
//   u = fp32(a[t, h] + dt_bias[h]);  sp = u > 20 ? u : fp32(log1p(exp(double(u))))  (torch's softplus)
//   g[t, h] = fp32(neg_a[h] * sp)                                     (neg_a = -exp(A_log), fp32, host)
// Numerics: the oracle is ref::L2NormRows plus DeltaNetBlock's beta / g loop. The products of fp32 values
// are exact in double and the only other difference is the order of the double sum, so q and k equal the
// oracle's fp32 values except where a double rounding crosses an fp32 boundary (1 fp32 ulp, very rare);
// beta and g use CUDA's double exp / log1p (<= 1-2 double ulps): the same.
//
// Shapes (elements): qkv [num_tokens, qkv_stride] fp32, in place (qkv_stride >= 2 * num_k_heads * k_dim);
// b [num_tokens, b_stride] and a [num_tokens, a_stride] of T with the v heads at columns [0, num_v_heads)
// (in_proj_b / in_proj_a outputs; strides >= num_v_heads); neg_a, dt_bias [num_v_heads] fp32; beta and g
// [num_tokens, num_v_heads] fp32, contiguous. beta and g must not overlap qkv, a or b.
// dtypes: T in {bf16_t, float} (a and b only). Limits: k_dim in [1, 1024].
// Errors: INVALID_ARGUMENT (shapes, null pointers), INTERNAL (launch). Asynchronous on `stream`; no state.
// Per token, not per sequence: needs no cu_seqlens.
//
// Predicted time (memory-bound): q | k read twice (the second pass hits L1) and written once, a and b read,
// beta and g written: Qwen3.5-27B (2 x 16 x 128 q | k, 48 v heads) at 8192 tokens moves ~0.14 GB,
// ~35 us at 4.15 TB/s.
#ifndef SCORED_ENGINE_KERNELS_DELTA_NET_PREP_H_
#define SCORED_ENGINE_KERNELS_DELTA_NET_PREP_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

template <typename T>
absl::Status DeltaNetPrep(float* qkv,  // [num_tokens, qkv_stride]: q heads at [0, nk k_dim), k heads after
                          int64_t qkv_stride,
                          const T* b,  // [num_tokens, b_stride], v heads at [0, num_v_heads)
                          int64_t b_stride,
                          const T* a,  // [num_tokens, a_stride], v heads at [0, num_v_heads)
                          int64_t a_stride,
                          const float* neg_a,    // [num_v_heads]: -exp(A_log)
                          const float* dt_bias,  // [num_v_heads]
                          int64_t num_tokens, int64_t num_k_heads, int64_t num_v_heads, int64_t k_dim,
                          float* beta,  // [num_tokens, num_v_heads]
                          float* g,     // [num_tokens, num_v_heads]
                          cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_DELTA_NET_PREP_H_

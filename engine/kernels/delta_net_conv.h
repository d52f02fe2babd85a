// Qwen3.5 Gated DeltaNet, step 1 of the token mixer: the causal depthwise conv1d + SiLU over the q | k | v
// channels of in_proj_qkv's output (transformers' causal_conv1d_fn: left zero padding, no bias), over a
// varlen batch of independent sequences.
//
// Sequence s holds tokens [cu_seqlens[s], cu_seqlens[s + 1]). For token t of sequence s and channel
// c < channels, with start = cu_seqlens[s]:
//   acc = sum over j = 0 .. kernel - 1 ascending, where src = t - kernel + 1 + j >= start, of
//         double(weight[c * kernel + j]) * double(x[src * x_stride + c])           (in double)
//   y = fp32(acc);  out[t * channels + c] = fp32(y / (1 + exp(-y)))                 (SiLU in double)
// i.e. ref::CausalConv1dSilu (engine/reference/ops.h) of each sequence alone: every sequence starts from a
// zero history, so a token's result depends only on its own sequence, never on the batch around it.
// Numerics: each product is exact in double and the terms are added in the oracle's order, so y equals
// the oracle's bit for bit; the SiLU uses CUDA's double exp (<= 1 double ulp), so out equals the oracle's
// fp32 value except where that ulp crosses an fp32 rounding boundary (then 1 fp32 ulp; ~2^-29 of elements).
// The output is fp32 whatever T is: it feeds the L2 norm and the fp32 recurrent state (delta_net_prep.h,
// delta_net_rule.h), and one bf16 rounding here would cost 2^-9 relative ahead of a long recurrence.
//
// Shapes (elements): x [num_tokens, x_stride] of T with the conv channels at columns [0, channels)
// (x_stride >= channels: e.g. a GEMM output holding more columns); weight [channels, kernel] fp32 (the
// checkpoint's conv1d.weight [channels, 1, kernel] widened at load); out [num_tokens, channels] fp32,
// contiguous. cu_seqlens [num_seqs + 1] int32 device memory, cu_seqlens[0] = 0, non-decreasing,
// cu_seqlens[num_seqs] = num_tokens (the caller's guarantee: malformed offsets are clamped to
// [0, num_tokens] so no access leaves the arrays, but the results are then unspecified).
// Not in place: out must not overlap x. dtypes: T in {bf16_t, float}. Limits: kernel in [1, 64].
// Errors: INVALID_ARGUMENT (shapes, null pointers), INTERNAL (launch). Asynchronous on `stream`; no state.
//
// Predicted time (memory-bound): x read once from DRAM (the kernel - 1 re-reads of earlier rows hit L1/L2),
// 4 bytes written per element; one double exp and division per element (~50 fp64 instructions: ~0.1 ms of
// the H200's fp64 rate per 84 M elements, under the memory time). Qwen3.5-27B (10240 channels), 8192
// tokens, bf16 x: 0.17 GB in, 0.34 GB out, ~0.12 ms at 4.15 TB/s. DeltaNetTest.Throughput27B measures it.
#ifndef SCORED_ENGINE_KERNELS_DELTA_NET_CONV_H_
#define SCORED_ENGINE_KERNELS_DELTA_NET_CONV_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

template <typename T>
absl::Status DeltaNetConv1dSilu(const T* x,  // [num_tokens, x_stride], channels at [0, channels)
                                int64_t x_stride,
                                const float* weight,        // [channels, kernel]
                                const int32_t* cu_seqlens,  // [num_seqs + 1]
                                int64_t num_seqs, int64_t num_tokens, int64_t channels, int64_t kernel,
                                float* out,  // [num_tokens, channels]
                                cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_DELTA_NET_CONV_H_

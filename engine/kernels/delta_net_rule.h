// Qwen3.5 Gated DeltaNet, step 3 of the token mixer: the gated delta rule over a varlen batch of
// independent sequences (transformers' torch_recurrent_gated_delta_rule; torch_chunk_gated_delta_rule is the
// chunked form of the same function).
//
// Sequence s holds tokens [cu_seqlens[s], cu_seqlens[s + 1]). For each sequence and each v head h <
// num_v_heads, reading k head kh = h / (num_v_heads / num_k_heads), the state S [k_dim, v_dim] starts at 0
// (no history crosses a sequence boundary) and for each token t of the sequence, in order:
//   S = exp(g[t, h]) S;   S += k_t (beta[t, h] (v_t - S^T k_t))^T;   out[t, h, :] = S^T q_t
// with q_t = q[t * qkv_stride + kh * k_dim + i], k_t likewise, v_t = v[t * qkv_stride + h * v_dim + j].
// q and k as given (already L2-normalized and q scaled: delta_net_prep.h). This is ref::GatedDeltaRule of
// each sequence alone, so a token's result depends only on its own sequence, never on the batch.
// Numerics: the state lives in fp32 registers (the oracle keeps it in double). Per token, in fp32 with
// FMA: kv = S^T k (four partial sums per thread, then a fixed 4-lane butterfly), d = beta (v - exp(g) kv),
// S = fma(k, d, exp(g) S), out = S^T q (same order); exp(g) is fp32(exp(double(g))). The order depends only
// on k_dim and v_dim, never on the batch or the launch. The error against the double oracle is a few fp32
// ulps of the state per token, growing slowly with the sequence length; with |k| = 1 the update is a
// contraction, so it does not compound (delta_net_test.cc measures it and names the bound).
//
// Shapes (elements): q, k, v [num_tokens, qkv_stride] fp32 rows (for the conv output [num_tokens,
// 2 nk k_dim + nv v_dim]: q = qkv, k = qkv + nk k_dim, v = qkv + 2 nk k_dim, qkv_stride = 2 nk k_dim +
// nv v_dim); g (the log decay, <= 0) and beta [num_tokens, num_v_heads] fp32; out [num_tokens, num_v_heads,
// v_dim] fp32, contiguous. cu_seqlens [num_seqs + 1] int32 device memory, cu_seqlens[0] = 0,
// non-decreasing, cu_seqlens[num_seqs] = num_tokens (the caller's guarantee: offsets are clamped to
// [0, num_tokens], so malformed ones cause no out-of-bounds access, only unspecified results; rows of no
// sequence are not written). Not in place: out must not overlap the inputs.
// Limits: k_dim, v_dim in [1, 128]; num_v_heads a multiple of num_k_heads; num_seqs * num_v_heads < 2^31.
// Errors: INVALID_ARGUMENT (shapes, null pointers), INTERNAL (launch, shared-memory attribute).
// Asynchronous on `stream`; no state between calls.
//
// Kernel: recurrent. One block per (sequence, v head): 4 threads per state column, each holding
// ceil(k_dim / 4) (rounded up to 4, 8, 16 or 32) rows of the state in registers; the tokens' q, k, v, exp(g)
// and beta are staged in shared memory 16 tokens at a time, the next 16 copied (cp.async) while the current
// ones are applied. At k_dim = v_dim = 128: 512 threads, 108 registers (ptxas, sm_90a; no spills), 52 KiB
// of shared memory, so one block per SM.
// Predicted time (not yet measured): issue-bound on the token loop, ~165 instructions per thread per token
// x 16 warps over 4 schedulers ~ 660 cycles ~ 0.33 us per token per block at 128 x 128; the blocks run in
// waves of one per SM (132 on an H200). Qwen3.5-27B (48 v heads), 4 x 2048 tokens: 192 blocks, 2 waves,
// ~1.4 ms per layer. A single long sequence fills only num_v_heads SMs: the chunked (WY / UT-transform)
// form with tensor cores, which parallelizes over chunks, is the way to more (not written yet).
// DeltaNetTest.Throughput27B measures it.
#ifndef SCORED_ENGINE_KERNELS_DELTA_NET_RULE_H_
#define SCORED_ENGINE_KERNELS_DELTA_NET_RULE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

absl::Status GatedDeltaRule(const float* q,  // [num_tokens, qkv_stride], k head kh at [kh k_dim, ...)
                            const float* k,  // [num_tokens, qkv_stride], k head kh at [kh k_dim, ...)
                            const float* v,  // [num_tokens, qkv_stride], v head h at [h v_dim, ...)
                            int64_t qkv_stride,
                            const float* g,             // [num_tokens, num_v_heads]
                            const float* beta,          // [num_tokens, num_v_heads]
                            const int32_t* cu_seqlens,  // [num_seqs + 1]
                            int64_t num_seqs, int64_t num_tokens, int64_t num_k_heads, int64_t num_v_heads,
                            int64_t k_dim, int64_t v_dim,
                            float* out,  // [num_tokens, num_v_heads, v_dim]
                            cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_DELTA_NET_RULE_H_

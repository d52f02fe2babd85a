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
// Limits: k_dim, v_dim in [1, 128]; num_v_heads a multiple of num_k_heads; num_seqs * num_v_heads *
// ceil(v_dim / 64) < 2^31.
// Errors: INVALID_ARGUMENT (shapes, null pointers), INTERNAL (launch, shared-memory attribute).
// Asynchronous on `stream`; no state between calls.
//
// Kernel: recurrent. One block per (sequence, v head): 4 threads per state column, each holding
// ceil(k_dim / 4) (rounded up to 4, 8, 16 or 32) rows of the state in registers; the tokens' q, k, v, exp(g)
// and beta are staged in shared memory 16 tokens at a time, the next 16 copied (cp.async) while the current
// ones are applied. At k_dim = v_dim = 128: 512 threads, 108 registers (ptxas, sm_90a; no spills), 52 KiB
// of shared memory, so one block per SM.
// Predicted ~0.33 us per token per block at 128 x 128 (issue-bound, ~165 instructions per thread per
// token x 16 warps over 4 schedulers); measured on an H200 (DeltaNetTest.Throughput27B, Qwen3.5-27B's 48 v
// heads): 3.28 ms at 4 x 2048 tokens (192 blocks, 2 waves: 0.8 us per token per block, latency-bound), 6.56
// ms for one 8192-token sequence (48 SMs busy).
#ifndef SCORED_ENGINE_KERNELS_DELTA_NET_RULE_H_
#define SCORED_ENGINE_KERNELS_DELTA_NET_RULE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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

// The chunked form of the same function (transformers' torch_chunk_gated_delta_rule; the kernel's file
// comment, delta_net_chunk.cu, has its steps): per 64-token chunk the UT transform (a unit lower
// triangular inverse) turns the chunk's 64 rank-one updates into matrix products on tensor cores, and the
// state is updated once per chunk. Same arguments, limits, errors and batch invariance as GatedDeltaRule;
// one block per (sequence, v head, 64 state columns), so a single long sequence fills
// num_v_heads * ceil(v_dim / 64) SMs. Measured on an H200 at Qwen3.5-27B's shape (DeltaNetTest): within
// 1e-6 of the oracle (kTf32x3; kTf32 8e-4); 5.37 ms (kTf32x3) / 3.85 ms (kTf32) at 4 x 2048 tokens, 7.1 /
// 5.1 ms for one 8192-token sequence, 28.6 / 20.4 ms for one of 32768: not yet faster than the recurrent
// form, so the engine runs that one. Where the time goes: one block per SM (206 KiB of shared memory),
// fragments loaded and split per k step from shared memory, ~75 barriers per chunk; the next steps are
// ldmatrix-fed fragments, the chunk-local work (A, T, W, U) as a separate fully parallel pass, and bf16
// operands. `math` says how the products round:
enum class DeltaRuleMath {
  // Each product as three TF32 products of the operands' high and low parts (hi*hi + hi*lo + lo*hi):
  // fp32-accurate (the compute-dtype fp32 forward's).
  kTf32x3,
  // One TF32 product (10-bit mantissas, fp32 sums): the bf16 forward's, whose inputs carry 8 bits.
  kTf32,
};
absl::Status GatedDeltaRuleChunked(const float* q, const float* k, const float* v, int64_t qkv_stride,
                                   const float* g, const float* beta, const int32_t* cu_seqlens,
                                   int64_t num_seqs, int64_t num_tokens, int64_t num_k_heads,
                                   int64_t num_v_heads, int64_t k_dim, int64_t v_dim, DeltaRuleMath math,
                                   float* out,  // [num_tokens, num_v_heads, v_dim]
                                   cudaStream_t stream);

// The argument checks of both forms (`name` starts each message): false when there is nothing to launch
// (no tokens), INVALID_ARGUMENT as documented above.
absl::StatusOr<bool> CheckGatedDeltaRuleArgs(const char* name, const float* q, const float* k, const float* v,
                                             int64_t qkv_stride, const float* g, const float* beta,
                                             const int32_t* cu_seqlens, int64_t num_seqs, int64_t num_tokens,
                                             int64_t num_k_heads, int64_t num_v_heads, int64_t k_dim,
                                             int64_t v_dim, const float* out);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_DELTA_NET_RULE_H_

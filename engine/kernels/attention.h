// Causal grouped-query self-attention over a variable-length batch of independent windows.
//
// Sequence s holds tokens [cu_seqlens[s], cu_seqlens[s+1]) of the packed batch. For token t of sequence s
// (local index i = t - cu_seqlens[s]) and head h (kv head g = h / (num_heads / num_kv_heads)):
//   x[j] = (q[t, h, :] . k[cu_seqlens[s] + j, g, :]) * scale      scale = shape.scale, or head_dim^-1/2
//   x[j] = tanh(x[j] / softcap) * softcap                           only where shape.softcap > 0
//   keys j: j <= i, and i - window < j where shape.window > 0 (transformers' sliding-window causal mask)
//   out[t, h, :] = sum_j softmax(x)[j] * v[cu_seqlens[s] + j, g, :]
// (ref::CausalAttention with ref::AttentionOptions: scale, then soft cap, then mask, softmax.) Softmax with
// max subtraction (online, per key tile), fp32 accumulation; one rounding to T at the end. Tokens never see
// another sequence's keys, and a token's result depends only on its own sequence (batch-invariant). Every
// kernel below takes scale, softcap and window; with a window, key tiles wholly before a query tile's window
// are skipped, so the work follows the (query, key) pairs in reach: about w len - w^2 / 2 per sequence of
// length len >= w, against len^2 / 2 causal (3/4 of it for w = len / 2).
// Paths (kAuto's choice, CausalAttentionWith below): T = bf16_t with head_dim in {32, 64, 96, 128, 256} and
// the alignment below uses tensor cores (mma.sync m16n8k16 or, on Hopper, wgmma; bf16 inputs, fp32
// accumulate; the probabilities are rounded to bf16 before the P.V product, as flash-attention does; the
// soft cap uses tanhf); everything else (T = float, other head_dims, unaligned inputs) uses a SIMT fp32
// kernel (slower; tanhf for the cap, expf). Shapes (elements): q [num_tokens, q_stride] with head h at
// columns [h * head_dim, (h + 1) * head_dim); k, v [num_tokens, kv_stride] with kv head g at [g * head_dim,
// ...); out [num_tokens, num_heads * head_dim] contiguous. For a fused QKV output [num_tokens, (nh + 2 nkv) *
// hd]: q = qkv, k = qkv + nh*hd, v = qkv + (nh + nkv) * hd, q_stride = kv_stride = (nh + 2 nkv) * hd.
// cu_seqlens [num_seqs + 1] int32 device, cu_seqlens[0] = 0, non-decreasing, cu_seqlens[num_seqs] =
// num_tokens; max_seqlen >= every sequence length (host value: it sizes the grid). Not in place: out must
// not overlap q, k or v. dtypes: T in {bf16_t, float}. Limits: head_dim a multiple of 8 in [8, 256],
// num_seqs <= 65535, num_heads a multiple of num_kv_heads, scale >= 0, softcap >= 0, window >= 0 (all
// finite). The tensor-core path also needs q and out 4-byte aligned with an even q_stride, and k and v
// 16-byte aligned with kv_stride % 8 == 0 (a fused QKV buffer from cudaMalloc qualifies); at head_dim 256
// also q 16-byte aligned with q_stride % 8 == 0 and a device with 135 KiB of shared memory per block
// (sm_80, sm_90, sm_100; not sm_86 / sm_89 / sm_120); other inputs take the SIMT path.
// Errors: INVALID_ARGUMENT (shapes, unsupported head_dim, bad scale / softcap / window, null pointers),
// INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_ATTENTION_H_
#define SCORED_ENGINE_KERNELS_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

struct AttentionShape {
  int64_t num_tokens = 0;  // rows of q/k/v/out (sum of the sequence lengths)
  int32_t num_seqs = 0;
  int32_t max_seqlen = 0;  // >= the longest sequence
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int64_t q_stride = 0;   // elements between consecutive tokens of q
  int64_t kv_stride = 0;  // elements between consecutive tokens of k and of v
  // Score scale: > 0 replaces head_dim^-1/2 (Gemma: query_pre_attn_scalar^-1/2).
  float scale = 0.0f;
  // > 0: every score s (after the scale) becomes tanh(s / softcap) * softcap before the softmax (Gemma 2's
  // attn_logit_softcapping).
  float softcap = 0.0f;
  // > 0: the query at local index i of its sequence sees only keys j with i - window < j <= i (transformers'
  // sliding-window causal mask); 0: every j <= i.
  int32_t window = 0;
};

template <typename T>
absl::Status CausalAttention(const T* q,                 // [num_tokens, q_stride]
                             const T* k,                 // [num_tokens, kv_stride]
                             const T* v,                 // [num_tokens, kv_stride]
                             const int32_t* cu_seqlens,  // [num_seqs + 1]
                             const AttentionShape& shape,
                             T* out,  // [num_tokens, num_heads * head_dim]
                             cudaStream_t stream);

// Forces the SIMT path (tests compare the two paths; the engine never needs it).
template <typename T>
absl::Status CausalAttentionSimt(const T* q, const T* k, const T* v, const int32_t* cu_seqlens,
                                 const AttentionShape& shape, T* out, cudaStream_t stream);

// Kernel choice, for tests and measurements (the engine calls CausalAttention, which picks kAuto's
// choice). Every kernel takes the scale, the soft cap and the window.
//   kSimt: the fp32 SIMT kernel, every head_dim.
//   kMma16Rows: the tensor-core kernel with 16 query rows per warp, Q in registers (head_dim 32, 64, 96,
//     128).
//   kMma32RowsK32 / K64: the tensor-core kernel with Q staged in shared memory and 32- or 64-key tiles: 32
//     query rows per warp at head_dim 64, 96, 128; 16 rows per warp (8 warps) at 256, where 2 x 16 x 256
//     fp32 accumulators would not fit a thread's registers. Needs q also 16-byte aligned with q_stride % 8
//     == 0, and the device's shared memory (64-key tiles at 128: not sm_86 / sm_89 / sm_120; at 256: 198
//     KiB, sm_90 / sm_100 only; 32-key tiles at 256: 135 KiB).
//   kWgmma: the Hopper kernels (wgmma.mma_async, two warpgroups x 64 query rows; head_dim 128 with 128-key
//     tiles, 256 with 64-key tiles; the 32-row kernel's alignment, a compute capability 9.0 device and a
//     library built for sm_90a).
// kAuto (attention.cu, AutoKernel): the first that takes the input of kWgmma, kMma32RowsK64, kMma32RowsK32
// (head_dim 256 only), kMma16Rows, else kSimt.
enum class AttentionKernel { kAuto, kSimt, kMma16Rows, kMma32RowsK32, kMma32RowsK64, kWgmma };

// CausalAttention<bf16_t> with the kernel named. INVALID_ARGUMENT when that kernel cannot take the shape
// or alignment (no fallback), else as CausalAttention.
absl::Status CausalAttentionWith(AttentionKernel kernel, const bf16_t* q, const bf16_t* k, const bf16_t* v,
                                 const int32_t* cu_seqlens,  // [num_seqs + 1]
                                 const AttentionShape& shape,
                                 bf16_t* out,  // [num_tokens, num_heads * head_dim]
                                 cudaStream_t stream);

// Whether CausalAttentionWith(kernel, ...) takes this input on the current device: shape and options within
// attention.h's limits, and the kernel's head_dim, alignment, shared-memory and device limits (kAuto and
// kSimt: every valid shape). Reads device attributes; no launch.
bool CausalAttentionSupports(AttentionKernel kernel, const bf16_t* q, const bf16_t* k, const bf16_t* v,
                             const bf16_t* out, const AttentionShape& shape);

// The kernel kAuto runs for this (valid) bf16 input on the current device.
AttentionKernel CausalAttentionAutoKernel(const bf16_t* q, const bf16_t* k, const bf16_t* v,
                                          const bf16_t* out, const AttentionShape& shape);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_ATTENTION_H_

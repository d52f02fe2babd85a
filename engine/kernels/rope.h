// Rotary position embedding, HF "rotate_half" convention, applied in place.
//
// For token t, head h < num_heads, i < head_dim/2, with x = base + t * token_stride + h * head_dim:
//   angle = fp32(positions[t] * inv_freq[i]);  c = fp32(cos(double(angle))), s likewise
//   (x[i], x[i + head_dim/2]) <- (x[i] c - x[i + head_dim/2] s,  x[i + head_dim/2] c + x[i] s)
// in fp32, rounded once to T. inv_freq [head_dim/2] fp32 in device memory is computed on the host exactly
// like RopeInvFreq of engine/model/rope_freq.h (default / linear / llama3 scaling all live in the table).
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
absl::Status Rope(T* x,  // [num_tokens, token_stride], heads at [h * head_dim, ...)
                  int64_t token_stride,
                  const int32_t* positions,  // [num_tokens]
                  const float* inv_freq,     // [head_dim / 2]
                  int64_t num_tokens, int64_t num_heads, int64_t head_dim, cudaStream_t stream);

// Fills the cos/sin table of positions [0, num_positions): for p < num_positions, i < half,
//   angle = fp32(fp32(p) * inv_freq[i]);  table[p][i] = (fp32(cos(double(angle))), fp32(sin(double(angle))))
// exactly the values Rope computes per call (same device code), so RopeWithTable(table) gives results
// bit-identical to Rope(inv_freq). The engine builds it once at load for positions [0, max_seq_len):
// Llama-3 (half 64) at 2048 positions is 1 MiB. inv_freq and table are device memory; table is written
// entirely, inv_freq is not modified. Asynchronous on `stream`.
// Limits: half >= 1, 0 <= num_positions <= 2^31 (positions are int32).
// Errors: INVALID_ARGUMENT (shapes, null pointers), INTERNAL (launch).
absl::Status RopeCosSinTable(const float* inv_freq,  // [half]
                             int64_t num_positions, int64_t half,
                             float* table,  // [num_positions, half, 2]: (cos, sin) of position p, pair i
                             cudaStream_t stream);
// The same table with both values then multiplied by `scaling` in fp32 (longrope's attention factor; exact
// for 1), as ref::Rope multiplies them.
absl::Status RopeCosSinTable(const float* inv_freq,  // [half]
                             int64_t num_positions, int64_t half, float scaling,
                             float* table,  // [num_positions, half, 2]
                             cudaStream_t stream);

// Rope with cos/sin read from a table built by RopeCosSinTable (same half = head_dim / 2) instead of
// evaluated per call: same contract, shapes and results (bit for bit, T = float and bf16_t) as Rope above.
// Positions: the caller guarantees 0 <= positions[t] < num_positions (the engine's windows are at most
// max_seq_len long). A token whose position falls outside is never read from the table (no out-of-bounds
// access) and its rotated q|k elements are set to NaN, so the mistake shows in the output instead of
// being clamped to a wrong angle; other tokens are unaffected. No status reports it (the positions live
// in device memory).
// Speed: memory-bound, one pass over the rotated elements with no per-token barrier; the table (L2
// resident) adds no DRAM traffic. Limits as Rope; table 16-byte aligned for the vector path (cudaMalloc is).
template <typename T>
absl::Status RopeWithTable(T* x,  // [num_tokens, token_stride], heads at [h * head_dim, ...)
                           int64_t token_stride,
                           const int32_t* positions,  // [num_tokens]
                           const float* table,        // [num_positions, head_dim / 2, 2]
                           int64_t num_positions, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                           cudaStream_t stream);

// Partial rotary (Phi-3's partial_rotary_factor): each head is head_dim elements wide, and only its first
// rotary_dim are rotated, as pairs (i, i + rotary_dim / 2) with the table of half = rotary_dim / 2; the other
// head_dim - rotary_dim elements are left unchanged. rotary_dim == head_dim is the function above. Limits:
// rotary_dim even, 2 <= rotary_dim <= head_dim; the vector path also needs head_dim % (16 B / sizeof(T)) ==
// 0.
template <typename T>
absl::Status RopeWithTable(T* x,  // [num_tokens, token_stride], heads at [h * head_dim, ...)
                           int64_t token_stride,
                           const int32_t* positions,  // [num_tokens]
                           const float* table,        // [num_positions, rotary_dim / 2, 2]
                           int64_t num_positions, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                           int64_t rotary_dim, cudaStream_t stream);

// Interleaved (GPT-J) pairs: the RopeWithTable above with pair i = (x[2i], x[2i + 1]) of each head's first
// rotary_dim elements instead of (x[i], x[i + rotary_dim / 2]); same table, same arithmetic, so fp32 results
// equal ref::Rope(..., interleaved = true) bit for bit. DeepSeek's rope_interleave (transformers'
// apply_rotary_pos_emb_interleave, which also permutes the result: ref::Rope says why that changes no
// q . k). Scalar path only. Limits and errors as RopeWithTable.
template <typename T>
absl::Status RopeInterleavedWithTable(T* x,  // [num_tokens, token_stride], heads at [h * head_dim, ...)
                                      int64_t token_stride,
                                      const int32_t* positions,  // [num_tokens]
                                      const float* table,        // [num_positions, rotary_dim / 2, 2]
                                      int64_t num_positions, int64_t num_tokens, int64_t num_heads,
                                      int64_t head_dim, int64_t rotary_dim, cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_ROPE_H_

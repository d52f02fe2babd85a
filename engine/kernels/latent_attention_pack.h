// Multi-head latent attention (DeepSeek-V3's MLA, the naive form of transformers 5.17
// DeepseekV3Attention.forward) as ordinary multi-head attention: the per-head query and key of the latent
// projections packed into heads of a width the attention kernels take (attention.h), the rope part first.
//
// For token t, head h (H heads), with nope = qk_nope_head_dim, rope = qk_rope_head_dim, vd = v_head_dim and
// packed width D >= max(nope + rope, vd):
//   out[t, 0 * H * D + h * D + ...] = Q_h = [q[t, h, nope : nope + rope] | q[t, h, 0 : nope] | 0 ...]
//   out[t, 1 * H * D + h * D + ...] = K_h = [k_rope[t, 0 : rope]          | kv[t, h, 0 : nope] | 0 ...]
//   out[t, 2 * H * D + h * D + ...] = V_h = [kv[t, h, nope : nope + vd]    | 0 ...]
// so Q_h . K_h = q_nope . k_nope + q_rope . k_rope (the order of a dot product's terms is free), the zero
// columns add nothing, V_h's first vd output columns are the head's output, and RoPE (kernels/rope.h) rotates
// each Q and K head's first `rope` elements with head_dim D: out is the fused q|k|v of 2H + H heads
// (q_stride = kv_stride = 3 H D) that kernels::CausalAttention reads. The shared k_rope is copied into every
// head; values are copied unchanged (no arithmetic: bit for bit the inputs).
//
// q [num_tokens, q_stride] (head h at [h * (nope + rope), ...)), kv [num_tokens, kv_stride] (head h at
// [h * (nope + vd), ...)), k_rope [num_tokens, k_rope_stride]; out [num_tokens, 3 * H * D] contiguous, must
// not overlap the inputs. dtypes: T in {bf16_t, float}.
// Errors: INVALID_ARGUMENT (shapes: D < nope + rope or D < vd, a stride shorter than its row, negative
// sizes; null pointers), INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_LATENT_ATTENTION_PACK_H_
#define SCORED_ENGINE_KERNELS_LATENT_ATTENTION_PACK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

struct LatentPackShape {
  int64_t num_heads = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t packed_head_dim = 0;  // D
};

// The packed head width for heads of qk_head_dim and v_head_dim: the smallest head_dim with tensor-core
// attention kernels (attention.h: 32, 64, 96, 128, 256) that holds both, else the next multiple of 8 (the
// SIMT kernel's; above 256 no attention kernel takes it: callers refuse it).
inline int64_t LatentPackedHeadDim(int64_t qk_head_dim, int64_t v_head_dim) {
  const int64_t need = qk_head_dim > v_head_dim ? qk_head_dim : v_head_dim;
  for (int64_t d : {32, 64, 96, 128, 256}) {
    if (need <= d) return d;
  }
  return (need + 7) / 8 * 8;
}

template <typename T>
absl::Status LatentAttentionPack(const T* q, int64_t q_stride,            // [num_tokens, q_stride]
                                 const T* kv, int64_t kv_stride,          // [num_tokens, kv_stride]
                                 const T* k_rope, int64_t k_rope_stride,  // [num_tokens, k_rope_stride]
                                 int64_t num_tokens, const LatentPackShape& shape,
                                 T* out,  // [num_tokens, 3 * num_heads * packed_head_dim]
                                 cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_LATENT_ATTENTION_PACK_H_

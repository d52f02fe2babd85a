// The multi-head latent attention block of a decoder layer (DeepSeek-V3's MLA, GLM-4.7-Flash; engine/model/
// family.h LatentAttentionTraits has the computation) on the forward's context (context.h), the naive form
// as the CPU oracle and transformers compute it: the input norm; one GEMM of q_a (or q_proj) and
// kv_a_proj_with_mqa (DeviceLayer::qkv) with their bias; the q_a and latent RMSNorms; q_b (with q_lora_rank)
// and kv_b; every head's q and key [k_nope | the shared k_rope] and value packed into heads of
// kernels::LatentPackedHeadDim (latent_attention_pack.h: the rope part first, zeros after); the interleaved
// or half-split RoPE on the packed q and k heads; causal attention with the plan's scale; each head's first
// v_head_dim output columns into o_proj (DeviceLayer::o) joining the residual stream. One row chunk (the
// family is not tensor-parallel).
#ifndef SCORED_ENGINE_CUDA_FORWARD_LATENT_ATTENTION_BLOCK_H_
#define SCORED_ENGINE_CUDA_FORWARD_LATENT_ATTENTION_BLOCK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/forward/context.h"
#include "engine/cuda/row_reduce.h"

namespace scored::cuda {

// Layer `l` (its weights `layer`, layer.latent's); input_sum: the row-parallel sum the input norm awaits
// (kNone for the first layer). Errors: the kernels' and the weight stream's statuses; INTERNAL for more
// than one row chunk or a layer whose RoPE table is chosen per sequence (longrope).
template <typename T>
absl::Status LatentAttentionBlock(ForwardContext<T>& ctx, const DeviceLayer& layer, int64_t l,
                                  RowSum input_sum);

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_FORWARD_LATENT_ATTENTION_BLOCK_H_

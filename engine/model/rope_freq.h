// Rotary position embedding frequencies of a model: the one table both backends rotate q and k with
// (the CPU reference, engine/reference, and the CUDA engine, which uploads it for kernels::ApplyRope), so a
// mistake here cannot hide behind a GPU-vs-reference comparison: tests/engine/model/rope_freq_test.cc checks
// it against the formula evaluated in double.
//
// inv_freq follows transformers' fp32 computation: e_i = fp32(2i) / fp32(head_dim);
// inv_freq[i] = 1 / fp32(theta^e_i) (the power evaluated in double, then rounded). Scaling
// (config.rope_scaling):
// (head_dim stands for config.rotary_dim under partial rotary.)
//   default: unchanged.
//   longrope: 1 / fp32(fp32(factor_i) * fp32(theta^e_i)), factor_i short or long (RopeInvFreqForLength).
//   linear:  inv_freq[i] / factor.
//   llama3:  wavelen = 2 pi / inv_freq; wavelen > orig / low_freq_factor -> inv_freq / factor;
//            wavelen < orig / high_freq_factor -> unchanged; otherwise the smooth blend
//            (1 - s) * inv_freq / factor + s * inv_freq, s = (orig / wavelen - low) / (high - low).
//   yarn:    e = 1 - clamp((i - low) / (high - low), 0, 1) over i < head_dim / 2, low / high the correction
//            dims of beta_fast / beta_slow turns at original_max_position_embeddings (floor / ceil when
//            truncate, then clamped to [0, head_dim - 1]);
//            inv_freq = (1 / (factor * theta^e_i)) * (1 - e) + (1 / theta^e_i) * e (config.h RopeScaling).
//   proportional: 1 / theta^e_i for i < int(proportion * head_dim // 2), 0 beyond, then / factor.
// All of it in fp32 as written (this file is compiled with -ffp-contract=off: no fused multiply-add), as
// transformers computes it on fp32 tensors. Which scalings a family accepts is its FamilyTraits' business
// (family.h); this function computes any of them.
#ifndef SCORED_ENGINE_MODEL_ROPE_FREQ_H_
#define SCORED_ENGINE_MODEL_ROPE_FREQ_H_

#include <vector>

#include "engine/model/config.h"

namespace scored {

// inv_freq[i] for i < config.rotary_dim / 2 (radians per position), from config.rotary_dim (head_dim when
// 0), config.rope_theta and config.rope_scaling; for longrope the short factors. Requires rotary_dim even
// and positive (ParseModelConfig guarantees it). Pure function; thread-safe.
std::vector<float> RopeInvFreq(const ModelConfig& config);

// The frequencies a sequence of seq_len tokens is rotated with: RopeInvFreq, except for longrope beyond
// original_max_position_embeddings: 1 / fp32(fp32(long_factor[i]) * fp32(theta^e_i)).
std::vector<float> RopeInvFreqForLength(const ModelConfig& config, int64_t seq_len);

// What cos and sin are multiplied by (fp32): longrope's or yarn's attention_factor, else 1.
float RopeAttentionScaling(const ModelConfig& config);

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_ROPE_FREQ_H_

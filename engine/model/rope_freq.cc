// RoPE frequencies (contract: rope_freq.h). Compiled with -ffp-contract=off (engine/model/CMakeLists.txt):
// every fp32 operation below rounds on its own, as in transformers.
#include "engine/model/rope_freq.h"

#include <cmath>

namespace scored {

std::vector<float> RopeInvFreq(const ModelConfig& config) { return RopeInvFreqForLength(config, 0); }

float RopeAttentionScaling(const ModelConfig& config) {
  return config.rope_scaling.type == RopeType::kLongrope
             ? static_cast<float>(config.rope_scaling.attention_factor)
             : 1.0f;
}

std::vector<float> RopeInvFreqForLength(const ModelConfig& config, int64_t seq_len) {
  const int64_t head_dim = config.rotary_dim > 0 ? config.rotary_dim : config.head_dim;
  const int64_t half = head_dim / 2;
  std::vector<float> inv_freq(half);
  const float theta = static_cast<float>(config.rope_theta);
  const RopeScaling& scaling = config.rope_scaling;
  const std::vector<double>* ext = nullptr;  // longrope's factors
  if (scaling.type == RopeType::kLongrope) {
    ext = seq_len > scaling.original_max_position_embeddings ? &scaling.long_factor : &scaling.short_factor;
  }
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float power =
        static_cast<float>(std::pow(static_cast<double>(theta), static_cast<double>(exponent)));
    inv_freq[i] = ext == nullptr ? 1.0f / power : 1.0f / (static_cast<float>((*ext)[i]) * power);
  }
  const float factor = static_cast<float>(scaling.factor);
  if (scaling.type == RopeType::kLinear) {
    for (float& f : inv_freq) f = f / factor;
  } else if (scaling.type == RopeType::kLlama3) {
    const float low = static_cast<float>(scaling.low_freq_factor);
    const float high = static_cast<float>(scaling.high_freq_factor);
    const float old_context = static_cast<float>(scaling.original_max_position_embeddings);
    const float low_freq_wavelen = old_context / low;
    const float high_freq_wavelen = old_context / high;
    const float two_pi = static_cast<float>(2.0 * M_PI);
    for (float& f : inv_freq) {
      const float wavelen = two_pi / f;
      if (wavelen > low_freq_wavelen) {
        f = f / factor;
      } else if (!(wavelen < high_freq_wavelen)) {
        const float smooth = (old_context / wavelen - low) / (high - low);
        f = (1.0f - smooth) * f / factor + smooth * f;
      }
    }
  }
  return inv_freq;
}

}  // namespace scored

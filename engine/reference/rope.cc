// Rotary position embedding (HF Llama "rotate_half" convention) and its frequencies.
//
// inv_freq follows transformers' fp32 computation: e_i = fp32(2i) / fp32(head_dim);
// inv_freq[i] = 1 / fp32(theta^e_i) (the power evaluated in double, then rounded). Scaling:
//   linear: inv_freq[i] / factor.
//   llama3: wavelen = 2 pi / inv_freq; wavelen > orig / low_freq_factor -> inv_freq / factor;
//           wavelen < orig / high_freq_factor -> unchanged; otherwise the smooth blend
//           (1 - s) * inv_freq / factor + s * inv_freq, s = (orig / wavelen - low) / (high - low).
// All of it in fp32, as transformers computes it on fp32 tensors.
// Rope: angle = fp32(position * inv_freq[i]); c = cos(angle), s = sin(angle) rounded to fp32;
// (x_i, x_{i+h}) -> (x_i c - x_{i+h} s, x_{i+h} c + x_i s) in fp32, h = head_dim / 2.
#include <cmath>

#include "engine/reference/ops.h"

namespace scored::ref {

std::vector<float> RopeInvFreq(const ModelConfig& config) {
  const int64_t head_dim = config.head_dim;
  const int64_t half = head_dim / 2;
  std::vector<float> inv_freq(half);
  const float theta = static_cast<float>(config.rope_theta);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float power =
        static_cast<float>(std::pow(static_cast<double>(theta), static_cast<double>(exponent)));
    inv_freq[i] = 1.0f / power;
  }
  const RopeScaling& scaling = config.rope_scaling;
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

void Rope(float* x,                  // [num_tokens, num_heads, head_dim]
          const int32_t* positions,  // [num_tokens]
          const float* inv_freq,     // [head_dim / 2]
          int64_t num_tokens, int64_t num_heads, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  std::vector<float> cos_t(half), sin_t(half);
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];
      cos_t[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin_t[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
    for (int64_t h = 0; h < num_heads; ++h) {
      float* v = x + (t * num_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i];
        const float b = v[i + half];
        const float ac = a * cos_t[i], bs = b * sin_t[i];
        const float bc = b * cos_t[i], as = a * sin_t[i];
        v[i] = ac - bs;
        v[i + half] = bc + as;
      }
    }
  }
}

}  // namespace scored::ref

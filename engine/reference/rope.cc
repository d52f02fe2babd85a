// Rotary position embedding (HF Llama "rotate_half" convention). The frequencies come from
// engine/model/rope_freq.h (RopeInvFreq), shared with the CUDA engine.
// Rope: angle = fp32(position * inv_freq[i]); c = cos(angle), s = sin(angle) rounded to fp32;
// (x_i, x_{i+h}) -> (x_i c - x_{i+h} s, x_{i+h} c + x_i s) in fp32, h = rotary_dim / 2 (c, s times the
// attention scaling in fp32); elements past rotary_dim are left as they are. Interleaved: pairs (2i, 2i+1).
#include <cmath>

#include "engine/reference/ops.h"

namespace scored::ref {

void Rope(float* x,                  // [num_tokens, num_heads, head_dim]
          const int32_t* positions,  // [num_tokens]
          const float* inv_freq,     // [rotary_dim / 2]
          int64_t num_tokens, int64_t num_heads, int64_t head_dim, int64_t rotary_dim,
          float attention_scaling, bool interleaved) {
  const int64_t half = (rotary_dim > 0 ? rotary_dim : head_dim) / 2;
  // Pair i is (v[i * lo_step], v[i * lo_step + hi_offset]).
  const int64_t lo_step = interleaved ? 2 : 1, hi_offset = interleaved ? 1 : half;
  std::vector<float> cos_t(half), sin_t(half);
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];
      cos_t[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_scaling;
      sin_t[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_scaling;
    }
    for (int64_t h = 0; h < num_heads; ++h) {
      float* v = x + (t * num_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        float& lo = v[i * lo_step];
        float& hi = v[i * lo_step + hi_offset];
        const float a = lo, b = hi;
        const float ac = a * cos_t[i], bs = b * sin_t[i];
        const float bc = b * cos_t[i], as = a * sin_t[i];
        lo = ac - bs;
        hi = bc + as;
      }
    }
  }
}

}  // namespace scored::ref

// gpt-oss's clamped SwiGLU (contract: ops.h ClampedSwiGlu; transformers 5.17 GptOssExperts._apply_gate).
#include <algorithm>
#include <cmath>

#include "engine/reference/ops.h"

namespace scored::ref {

void ClampedSwiGlu(const float* gate,  // [num_tokens, intermediate_size]
                   const float* up,    // [num_tokens, intermediate_size]
                   int64_t num_tokens, int64_t intermediate_size,
                   float* out) {    // [num_tokens, intermediate_size]
  constexpr float kLimit = 7.0f;    // GptOssExperts.limit
  constexpr float kAlpha = 1.702f;  // GptOssExperts.alpha, as torch multiplies an fp32 tensor by it
  const int64_t n = num_tokens * intermediate_size;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i] > kLimit ? kLimit : gate[i];  // clamp(max=7): NaN stays NaN
    const float u = up[i] > kLimit ? kLimit : (up[i] < -kLimit ? -kLimit : up[i]);
    const float x = g * kAlpha;
    const float sigmoid = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x))));
    const float glu = g * sigmoid;
    out[i] = (u + 1.0f) * glu;
  }
}

}  // namespace scored::ref

// Causal depthwise conv1d + SiLU (Qwen3.5's Gated DeltaNet): y[t, c] = silu(sum_j w[c, j] x[t - K + 1 + j,
// c]), x before the first token zero. The sum in double, rounded once; silu in double, rounded once.
#include <cmath>

#include "engine/reference/ops.h"

namespace scored::ref {

void CausalConv1dSilu(const float* x, const float* weight, int64_t num_tokens, int64_t channels,
                      int64_t kernel, float* out) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t c = 0; c < channels; ++c) {
      double acc = 0.0;
      for (int64_t j = 0; j < kernel; ++j) {
        const int64_t src = t - (kernel - 1) + j;
        if (src >= 0) acc += static_cast<double>(weight[c * kernel + j]) * x[src * channels + c];
      }
      const float v = static_cast<float>(acc);
      out[t * channels + c] = static_cast<float>(v / (1.0 + std::exp(-static_cast<double>(v))));
    }
  }
}

}  // namespace scored::ref

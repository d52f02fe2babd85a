// The Gated DeltaNet's output norm (Qwen3_5RMSNormGated): out = w * (x / sqrt(mean x^2 + eps)) * silu(z),
// the mean in double; each product rounded to fp32 in transformers' order (normalized x, times w, times
// silu(z)).
#include <cmath>

#include "engine/reference/ops.h"

namespace scored::ref {

void GatedRmsNorm(const float* x, const float* z, const float* weight, int64_t rows, int64_t dim, double eps,
                  float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* zr = z + r * dim;
    double sum = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(dim) + eps));
    for (int64_t i = 0; i < dim; ++i) {
      const float normed = weight[i] * (xr[i] * inv);
      const float silu = static_cast<float>(zr[i] / (1.0 + std::exp(-static_cast<double>(zr[i]))));
      out[r * dim + i] = normed * silu;
    }
  }
}

}  // namespace scored::ref

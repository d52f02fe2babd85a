// RMSNorm: out[t, i] = fp32(x[t, i] * r) * weight[i], r = 1 / sqrt(mean_i(x[t, :]^2) + eps) in double.
// In place allowed (out == x): each row is fully reduced before it is written.
#include <cmath>

#include "engine/reference/ops.h"

namespace scored::ref {

void RmsNorm(const float* x,       // [num_tokens, hidden_size]
             const float* weight,  // [hidden_size]
             int64_t num_tokens, int64_t hidden_size, double eps,
             float* out) {  // [num_tokens, hidden_size]
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = x + t * hidden_size;
    double sum_sq = 0.0;
    for (int64_t i = 0; i < hidden_size; ++i) sum_sq += static_cast<double>(row[i]) * row[i];
    const double r = 1.0 / std::sqrt(sum_sq / static_cast<double>(hidden_size) + eps);
    float* dst = out + t * hidden_size;
    for (int64_t i = 0; i < hidden_size; ++i) {
      dst[i] = static_cast<float>(static_cast<double>(row[i]) * r) * weight[i];
    }
  }
}

}  // namespace scored::ref

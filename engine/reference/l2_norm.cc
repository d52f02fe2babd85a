// L2 normalization of rows (Qwen3.5's Gated DeltaNet q and k; transformers' l2norm): x * rsqrt(sum x^2 +
// eps), the sum and the root in double, the product rounded once.
#include <cmath>

#include "engine/reference/ops.h"

namespace scored::ref {

void L2NormRows(float* x, int64_t rows, int64_t dim, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * dim;
    double sum = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum += static_cast<double>(v[i]) * v[i];
    const double inv = 1.0 / std::sqrt(sum + eps);
    for (int64_t i = 0; i < dim; ++i) v[i] = static_cast<float>(v[i] * inv);
  }
}

}  // namespace scored::ref

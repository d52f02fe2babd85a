// The attention output gate (Qwen3.5): x *= sigmoid(gate), the sigmoid in double rounded once to fp32, one
// fp32 product.
#include <cmath>

#include "engine/reference/ops.h"

namespace scored::ref {

void SigmoidGateMul(float* x, const float* gate, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    x[i] *= static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(gate[i]))));
  }
}

}  // namespace scored::ref

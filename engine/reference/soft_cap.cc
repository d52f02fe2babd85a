// Logit soft-capping (Gemma 2's final_logit_softcapping, transformers: logits / cap; tanh; * cap, each an
// fp32 operation): x = fp32(fp32(tanh(fp32(x / cap))) * cap), the tanh evaluated in double and rounded once.
#include <cmath>

#include "engine/reference/ops.h"

namespace scored::ref {

void SoftCap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) {
    const float scaled = x[i] / cap;
    x[i] = static_cast<float>(std::tanh(static_cast<double>(scaled))) * cap;
  }
}

}  // namespace scored::ref

// Gemma's RMSNorm multiplies by (1 + weight) (transformers: output * (1.0 + self.weight.float()), an fp32
// addition): the weight the plain RmsNorm op then uses is fp32(1 + w), computed once at load.
#include "engine/reference/ops.h"

namespace scored::ref {

void OffsetNormWeight(float* weight, int64_t n) {
  for (int64_t i = 0; i < n; ++i) weight[i] = 1.0f + weight[i];
}

}  // namespace scored::ref

// GeGLU with the tanh-approximated GELU (Gemma's hidden_activation gelu_pytorch_tanh, torch's
// gelu(approximate="tanh")): out[t, i] = fp32(gelu_tanh(gate[t, i])) * up[t, i], the GELU evaluated in double
// and rounded once (torch's fp32 kernel is within an ulp or two of that), the product in fp32.
// out may alias gate or up (element-wise).
#include <cmath>

#include "engine/reference/ops.h"

namespace scored::ref {

float GeluTanh(float x) {
  const double v = x;
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  return static_cast<float>(0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v))));
}

void GeluTanhGlu(const float* gate,  // [num_tokens, intermediate_size]
                 const float* up,    // [num_tokens, intermediate_size]
                 int64_t num_tokens, int64_t intermediate_size,
                 float* out) {  // [num_tokens, intermediate_size]
  const int64_t n = num_tokens * intermediate_size;
  for (int64_t i = 0; i < n; ++i) out[i] = GeluTanh(gate[i]) * up[i];
}

}  // namespace scored::ref

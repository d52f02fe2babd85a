// SwiGLU: out[t, i] = silu(gate[t, i]) * up[t, i], silu(g) = g / (1 + expf(-g)), all fp32.
// out may alias gate or up (element-wise).
#include <cmath>

#include "engine/reference/ops.h"

namespace scored::ref {

void SwiGlu(const float* gate,  // [num_tokens, intermediate_size]
            const float* up,    // [num_tokens, intermediate_size]
            int64_t num_tokens, int64_t intermediate_size,
            float* out) {  // [num_tokens, intermediate_size]
  const int64_t n = num_tokens * intermediate_size;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float silu = g / (1.0f + std::exp(-g));
    out[i] = silu * up[i];
  }
}

}  // namespace scored::ref

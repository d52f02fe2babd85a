// FP8 E4M3FN rounding and W8A8 dynamic per-token activation fake quantization (compressed-tensors'
// emulation): scale = fp32(amax / 448); q = fp8(clamp(x / scale, -448, 448)) with round-to-nearest-even;
// x = fp32(q) * scale, all fp32. A zero row (scale 0) stays zero.
//
// E4M3FN: bias 7, 3 mantissa bits, normals from 2^-6 (step 2^(e-3)), subnormals k * 2^-9, largest 448.
#include <algorithm>
#include <cmath>

#include "engine/reference/ops.h"

namespace scored::ref {

float RoundToFp8E4M3(float x) {
  if (std::isnan(x)) return x;
  const float a = std::min(std::fabs(x), 448.0f);
  // Spacing of E4M3 values around a: 2^(e - 3) for a in [2^e, 2^(e+1)), e >= -6; 2^-9 below 2^-6.
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): a in [2^(e-1), 2^e)
  const int exponent = std::max(e - 1, -6);
  const float quantum = std::ldexp(1.0f, exponent - 3);
  // a / quantum is exact (power-of-two scaling); nearbyint rounds half to even in the default mode.
  const float rounded = std::nearbyint(a / quantum) * quantum;
  return std::copysign(std::min(rounded, 448.0f), x);
}

void FakeQuantizeFp8PerToken(float* x,  // [num_tokens, in_features]
                             int64_t num_tokens, int64_t in_features) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    float* row = x + t * in_features;
    float amax = 0.0f;
    for (int64_t i = 0; i < in_features; ++i) amax = std::max(amax, std::fabs(row[i]));
    const float scale = amax / 448.0f;
    if (scale == 0.0f) continue;
    for (int64_t i = 0; i < in_features; ++i) {
      const float scaled = std::clamp(row[i] / scale, -448.0f, 448.0f);
      row[i] = RoundToFp8E4M3(scaled) * scale;
    }
  }
}

}  // namespace scored::ref

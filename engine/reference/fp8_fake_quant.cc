// FP8 E4M3FN rounding and W8A8 dynamic activation fake quantization, per token or per (token, column
// group) (compressed-tensors' emulation): scale = fp32(amax / 448); q = fp8(clamp(x / scale, -448, 448))
// with round-to-nearest-even; x = fp32(q) * scale, all fp32. An all-zero span (scale 0) stays zero.
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

namespace {

// Fake-quantizes x[0, n) with one scale.
void FakeQuantizeSpan(float* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = amax / 448.0f;
  if (scale == 0.0f) return;
  for (int64_t i = 0; i < n; ++i) {
    const float scaled = std::clamp(x[i] / scale, -448.0f, 448.0f);
    x[i] = RoundToFp8E4M3(scaled) * scale;
  }
}

}  // namespace

void FakeQuantizeFp8PerToken(float* x,  // [num_tokens, in_features]
                             int64_t num_tokens, int64_t in_features) {
  for (int64_t t = 0; t < num_tokens; ++t) FakeQuantizeSpan(x + t * in_features, in_features);
}

void FakeQuantizeFp8PerTokenGroup(float* x,  // [num_tokens, in_features]
                                  int64_t num_tokens, int64_t in_features, int64_t group_size) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t g0 = 0; g0 < in_features; g0 += group_size) {
      FakeQuantizeSpan(x + t * in_features + g0, std::min(group_size, in_features - g0));
    }
  }
}

}  // namespace scored::ref

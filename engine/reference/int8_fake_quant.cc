// W8A8 INT8 dynamic per-token activation fake quantization, exactly as compressed-tensors computes it in a
// float32 transformers forward (the contract is in ops.h; the library lines it follows are named there).
//
// Every step is one fp32 operation in the library's order (a division is a true division, never a multiply
// by a reciprocal), so the result is bit-identical to torch's on any input, whatever the accumulation order
// upstream. Checked on real inputs against reference_act_quant.safetensors of the int8 fixtures.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "engine/reference/ops.h"

namespace scored::ref {
namespace {

constexpr float kQMin = -128.0f;  // calculate_range: -2^8 / 2
constexpr float kQMax = 127.0f;   // calculate_range: 2^8 / 2 - 1

// torch.round then .to(torch.int8) of a value clamped to [-128, 127]; NaN (0 / 0) converts to 0 on the CPUs
// torch runs on (the all-zero asymmetric row; its output is 0 whatever the zero point).
float RoundZeroPoint(float z) {
  if (std::isnan(z)) return 0.0f;
  return std::nearbyint(std::clamp(z, kQMin, kQMax));
}

}  // namespace

Int8TokenParams Int8TokenQuantParams(const float* x, int64_t n, bool symmetric) {
  // calculate_qparams: min_vals = min(min(x), 0), max_vals = max(max(x), 0).
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  Int8TokenParams p;
  if (symmetric) {
    // scales = max(|min|, |max|) / (bit_range / 2), bit_range = 127 - (-128) = 255; zero point 0.
    p.scale = std::max(std::fabs(lo), std::fabs(hi)) / 127.5f;
    p.zero_point = 0.0f;
  } else {
    // scales = (max - min) / bit_range; zero_points = bit_min - min / scales, clamped to [bit_min, bit_max],
    // then rounded to int8 (zp_dtype) -- all before the zero scale is replaced by eps.
    p.scale = (hi - lo) / 255.0f;
    p.zero_point = RoundZeroPoint(kQMin - lo / p.scale);
  }
  // A zero scale becomes torch.finfo(float32).eps (2^-23), so an all-zero row divides by it and stays 0.
  if (p.scale == 0.0f) p.scale = FLT_EPSILON;
  return p;
}

void FakeQuantizeInt8Span(float* x, int64_t n, const Int8TokenParams& p) {
  for (int64_t i = 0; i < n; ++i) {
    // _quantize_dequantize: scaled = x / scale; scaled += zero_point; round(clamp(scaled, -128, 127));
    // (q - zero_point) * scale.
    const float scaled = x[i] / p.scale + p.zero_point;
    const float q = std::nearbyint(std::clamp(scaled, kQMin, kQMax));
    x[i] = (q - p.zero_point) * p.scale;
  }
}

void FakeQuantizeInt8PerToken(float* x,  // [num_tokens, in_features]
                              int64_t num_tokens, int64_t in_features, bool symmetric) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    float* row = x + t * in_features;
    FakeQuantizeInt8Span(row, in_features, Int8TokenQuantParams(row, in_features, symmetric));
  }
}

}  // namespace scored::ref

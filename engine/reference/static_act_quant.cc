// Static per-tensor FP8 activation fake quantization (llm-compressor's FP8 scheme: `input_scale` stored per
// linear), exactly as compressed-tensors computes it in a float32 transformers forward (contract in ops.h).
// The int8 variant is FakeQuantizeInt8Span with the stored scale and zero point.
#include <algorithm>

#include "engine/reference/ops.h"

namespace scored::ref {

void FakeQuantizeFp8Static(float* x, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) {
    // _quantize_dequantize: scaled = x / scale (no zero point: symmetric); round_to_quantized_type_args
    // clamps to the FP8 range, then .to(float8_e4m3fn) rounds; (q - 0) * scale.
    const float scaled = std::clamp(x[i] / scale, -448.0f, 448.0f);
    x[i] = RoundToFp8E4M3(scaled) * scale;
  }
}

}  // namespace scored::ref

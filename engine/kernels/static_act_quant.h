// Static per-tensor activation fake quantization (input_activations.dynamic false: llm-compressor's FP8
// scheme and static INT8 W8A8), the GPU twin of ref::FakeQuantizeFp8Static / ref::FakeQuantizeInt8Span with
// the stored input_scale (engine/reference/ops.h names the library lines). In place over x's rows:
//   FP8:  x = T(fp32(fp8_e4m3(clamp(x / scale, -448, 448))) * scale)   (round to nearest even, saturating)
//   INT8: x = T((rint(clamp(x / scale + zero_point, -128, 127)) - zero_point) * scale)   (ties to even)
// every step one fp32 IEEE operation in that order, so for T = float the result is bitwise the oracle's; for
// T = bf16_t the fp32 result is then rounded to bf16. scale: the checkpoint's input_scale widened to fp32
// (finite, > 0: the loader checks it); zero_point: input_zero_point, 0 when symmetric. No reduction: a
// row-parallel shard quantizes its columns alone, exactly as the whole row would.
// Shapes: x [num_tokens, x_stride] (elements, >= in_features). T in {bf16_t, float}. Errors:
// INVALID_ARGUMENT (shapes, null x, scale not finite and > 0), INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_STATIC_ACT_QUANT_H_
#define SCORED_ENGINE_KERNELS_STATIC_ACT_QUANT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

template <typename T>
absl::Status FakeQuantizeFp8Static(T* x,  // [num_tokens, x_stride], in place
                                   int64_t x_stride, int64_t num_tokens, int64_t in_features, float scale,
                                   cudaStream_t stream);

template <typename T>
absl::Status FakeQuantizeInt8Static(T* x,  // [num_tokens, x_stride], in place
                                    int64_t x_stride, int64_t num_tokens, int64_t in_features, float scale,
                                    float zero_point, cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_STATIC_ACT_QUANT_H_

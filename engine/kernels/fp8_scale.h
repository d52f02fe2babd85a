// W8A8 FP8 GEMM epilogue as a separate pass, for cuBLASLt builds / devices without outer-vector scaling:
// the GEMM ran on the raw E4M3 codes with unit scales, and this pass applies the per-token activation scale
// and the per-output-channel weight scale in place:
//   y[t, o] = T(float(y[t, o]) * (x_scale[t] * w_scale[o]))   (fp32 products, round-to-nearest-even)
// For T = float the GEMM's fp32 accumulator is scaled with one rounding; for T = bf16_t the accumulator was
// already rounded to bf16 once by the GEMM, so the result carries two bf16 roundings (2^-9 relative each,
// far below the FP8 quantization step of 2^-4 that W8A8 activations carry anyway).
// Elementwise: a token's result does not depend on the other rows (batch-invariant).
// Shapes: y [num_tokens, out_features] contiguous, x_scale [num_tokens], w_scale [out_features];
// out_features a multiple of 8 (16-byte vectors). dtypes: T in {bf16_t, float}.
// Errors: INVALID_ARGUMENT (shapes, null pointers), INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_FP8_SCALE_H_
#define SCORED_ENGINE_KERNELS_FP8_SCALE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

template <typename T>
absl::Status ApplyFp8Scales(T* y,  // [num_tokens, out_features], in place
                            int64_t num_tokens, int64_t out_features,
                            const float* x_scale,  // [num_tokens]
                            const float* w_scale,  // [out_features]
                            cudaStream_t stream);

// The same scaling joined to an fp32 accumulator (W8A8 o_proj / down_proj into the residual stream):
//   acc[t, o] = acc[t, o] + fp32(y[t, o] * (x_scale[t] * w_scale[o]))
// two fp32 roundings, bitwise ApplyFp8Scales<float> followed by an fp32 add. x_scale and w_scale both null:
// y is already scaled (cuBLASLt's outer-vector epilogue) and is added as it is. y and acc must not overlap.
// Shapes: y, acc [num_tokens, out_features] contiguous, 16-byte aligned; out_features a multiple of 8.
absl::Status AddFp8Scaled(const float* y,  // [num_tokens, out_features]
                          int64_t num_tokens, int64_t out_features,
                          const float* x_scale,  // [num_tokens] or nullptr
                          const float* w_scale,  // [out_features] or nullptr
                          float* acc,            // [num_tokens, out_features], updated in place
                          cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_FP8_SCALE_H_

// RMSNorm, plain and with the residual add fused in front.
//
//   RmsNorm:     out[t, i] = OutT(x[t, i] * rsqrt(mean_i(x[t, :]^2) + eps) * weight[i])
//   AddRmsNorm:  residual[t, i] += float(x[t, i]);               (residual updated in place)
//                out[t, i] = OutT(residual[t, i] * rsqrt(mean_i(residual[t, :]^2) + eps) * weight[i])
// Math in fp32: the sum of squares is a per-block tree in fp32 (fixed order: it depends only on
// hidden_size, never on num_tokens), eps is added in fp32, rsqrtf; one rounding to OutT at the end.
// Shapes: x, out [num_tokens, hidden_size] with row strides x_stride / out_stride (elements, >= hidden_size);
// residual [num_tokens, hidden_size] contiguous fp32; weight [hidden_size] fp32 (the engine widens the
// checkpoint's norm weights to fp32 once at load).
// dtypes: XT, OutT in {bf16_t, float} (all four pairs). In place: RmsNorm allows out == x (same stride);
// AddRmsNorm allows out == x but not out/x overlapping residual.
// Limits: hidden_size >= 1. Errors: INVALID_ARGUMENT (shapes, strides, null pointers), INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_RMS_NORM_H_
#define SCORED_ENGINE_KERNELS_RMS_NORM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

template <typename XT, typename OutT>
absl::Status RmsNorm(const XT* x,  // [num_tokens, x_stride]
                     int64_t x_stride,
                     const float* weight,  // [hidden_size]
                     int64_t num_tokens, int64_t hidden_size, float eps,
                     OutT* out,  // [num_tokens, out_stride]
                     int64_t out_stride, cudaStream_t stream);

template <typename XT, typename OutT>
absl::Status AddRmsNorm(const XT* x,  // [num_tokens, x_stride]
                        int64_t x_stride,
                        float* residual,      // [num_tokens, hidden_size], updated in place
                        const float* weight,  // [hidden_size]
                        int64_t num_tokens, int64_t hidden_size, float eps,
                        OutT* out,  // [num_tokens, out_stride]
                        int64_t out_stride, cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_RMS_NORM_H_

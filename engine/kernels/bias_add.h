// Bias add (Qwen2 q/k/v projections), in place: x[t, j] = T(float(x[t, j]) + bias[j]) for j < width.
//
// x [num_tokens, token_stride] (elements; width <= token_stride), bias [width] fp32 (the engine widens the
// checkpoint's bias once at load). For a fused QKV output pass width = (nh + 2 nkv) * head_dim and the
// concatenated q|k|v bias. dtypes: T in {bf16_t, float}; fp32 add, one rounding to T.
// Errors: INVALID_ARGUMENT (shapes, null pointers), INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_BIAS_ADD_H_
#define SCORED_ENGINE_KERNELS_BIAS_ADD_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

template <typename T>
absl::Status BiasAdd(T* x,  // [num_tokens, token_stride]
                     int64_t token_stride,
                     const float* bias,  // [width]
                     int64_t num_tokens, int64_t width, cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_BIAS_ADD_H_

// W8A8 dynamic per-token FP8 E4M3 activation quantization (compressed-tensors' scheme, DESIGN.md §6).
//
// For each row t: amax = max_i |x[t, i]|; scale[t] = fp32(amax / 448) (IEEE division);
//   q[t, i] = fp8_e4m3(x[t, i] / scale[t]) with round-to-nearest-even, saturating to +-448
//   (engine/base/dtype.h FloatToFp8E4M3); a row with amax == 0 gets scale 0 and q = 0.
// QuantizeFp8PerToken writes q (uint8 bit patterns) and scale (fp32) for an FP8 GEMM.
// FakeQuantizeFp8PerToken writes x[t, i] = T(fp32(q[t, i]) * scale[t]) in place: for T = float this is
// bit-exact with ref::FakeQuantizeFp8PerToken; for T = bf16_t the product is then rounded to bf16.
// One block per row; amax is a max (order-independent, exact).
// Tensor parallelism: a row-parallel shard sees only part of each token's input, so the scale needs the
// amax over every rank's columns. Fp8RowAmax writes each row's local amax, the ranks all-reduce it (max,
// exact), and FakeQuantizeFp8PerTokenWithAmax quantizes with the given amax: the result is bitwise what
// FakeQuantizeFp8PerToken gives on the whole row.
// Shapes: x [num_tokens, x_stride] (elements, >= in_features), q [num_tokens, in_features] contiguous,
// scale [num_tokens]. dtypes: T in {bf16_t, float}.
// Errors: INVALID_ARGUMENT (shapes, null pointers), INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_FP8_QUANT_H_
#define SCORED_ENGINE_KERNELS_FP8_QUANT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

template <typename T>
absl::Status QuantizeFp8PerToken(const T* x,  // [num_tokens, x_stride]
                                 int64_t x_stride, int64_t num_tokens, int64_t in_features,
                                 uint8_t* q,    // [num_tokens, in_features] FP8 E4M3FN bits
                                 float* scale,  // [num_tokens]
                                 cudaStream_t stream);

template <typename T>
absl::Status FakeQuantizeFp8PerToken(T* x,  // [num_tokens, x_stride], in place
                                     int64_t x_stride, int64_t num_tokens, int64_t in_features,
                                     cudaStream_t stream);

template <typename T>
absl::Status Fp8RowAmax(const T* x,  // [num_tokens, x_stride]
                        int64_t x_stride, int64_t num_tokens, int64_t in_features,
                        float* amax,  // [num_tokens]: max_i |x[t, i]|
                        cudaStream_t stream);

template <typename T>
absl::Status FakeQuantizeFp8PerTokenWithAmax(T* x,  // [num_tokens, x_stride], in place
                                             int64_t x_stride, int64_t num_tokens, int64_t in_features,
                                             const float* amax,  // [num_tokens], >= 0
                                             cudaStream_t stream);

template <typename T>
absl::Status QuantizeFp8PerTokenWithAmax(const T* x,  // [num_tokens, x_stride]
                                         int64_t x_stride, int64_t num_tokens, int64_t in_features,
                                         const float* amax,  // [num_tokens], >= 0
                                         uint8_t* q,         // [num_tokens, in_features] FP8 E4M3FN bits
                                         float* scale,       // [num_tokens]: amax / 448
                                         cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_FP8_QUANT_H_

// W8A8 dynamic per-token INT8 activation fake quantization, as compressed-tensors 0.19 computes it at
// inference (the CPU oracle ref::FakeQuantizeInt8PerToken, engine/reference/ops.h, names the library lines).
//
// For each row t, over its in_features columns:
//   lo = min(min_i x[t, i], 0);  hi = max(max_i x[t, i], 0)
//   symmetric:  scale = max(|lo|, |hi|) / 127.5;  zp = 0
//   asymmetric: scale = (hi - lo) / 255;  zp = rint(clamp(-128 - lo / scale, -128, 127)), 0 where that is NaN
//   scale == 0 -> FLT_EPSILON (2^-23)
//   x[t, i] = T((rint(clamp(x[t, i] / scale + zp, -128, 127)) - zp) * scale)
// every step one fp32 IEEE operation in that order (rint: ties to even), so for T = float the result is
// bitwise the oracle's; for T = bf16_t the product is then rounded to bf16. One block per row; lo and hi are
// a min and a max (exact, order-independent). Tensor parallelism: a row-parallel shard sees only part of each
// token's input. Int8RowRange writes each row's local (hi, -lo), the ranks all-reduce them (max, exact), and
// FakeQuantizeInt8PerTokenWithRange quantizes with that range: bitwise what FakeQuantizeInt8PerToken gives on
// the whole row. Shapes: x [num_tokens, x_stride] (elements, >= in_features), range [num_tokens, 2]. T in
// {bf16_t, float}. Errors: INVALID_ARGUMENT (shapes, null pointers), INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_INT8_QUANT_H_
#define SCORED_ENGINE_KERNELS_INT8_QUANT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

template <typename T>
absl::Status FakeQuantizeInt8PerToken(T* x,  // [num_tokens, x_stride], in place
                                      int64_t x_stride, int64_t num_tokens, int64_t in_features,
                                      bool symmetric, cudaStream_t stream);

template <typename T>
absl::Status Int8RowRange(const T* x,  // [num_tokens, x_stride]
                          int64_t x_stride, int64_t num_tokens, int64_t in_features,
                          float* range,  // [num_tokens, 2]: max(max_i x, 0), max(-min_i x, 0)
                          cudaStream_t stream);

template <typename T>
absl::Status FakeQuantizeInt8PerTokenWithRange(T* x,  // [num_tokens, x_stride], in place
                                               int64_t x_stride, int64_t num_tokens, int64_t in_features,
                                               bool symmetric,
                                               const float* range,  // [num_tokens, 2], as Int8RowRange's
                                               cudaStream_t stream);

// The real quantization for an int8 GEMM (kernels/int8_gemm.h), symmetric only: q[t, i] = the int8 value
// rint(clamp(x[t, i] / scale)) and scale[t] = the token's scale, exactly those FakeQuantizeInt8PerToken(x,
// symmetric) multiplies back (so q * scale is bitwise its fp32 result). `range` [num_tokens, 2] as
// Int8RowRange's (tensor parallelism), or nullptr to take each row's own. q is dense [num_tokens,
// in_features].
template <typename T>
absl::Status QuantizeInt8PerToken(const T* x,  // [num_tokens, x_stride]
                                  int64_t x_stride, int64_t num_tokens, int64_t in_features,
                                  const float* range,  // [num_tokens, 2] or nullptr
                                  int8_t* q,           // [num_tokens, in_features]
                                  float* scale,        // [num_tokens]
                                  cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_INT8_QUANT_H_

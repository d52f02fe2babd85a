// SwiGLU gate: out[t, i] = T(silu(gate[t, i]) * up[t, i]), silu(g) = g / (1 + exp(-g)), fp32 math, one
// rounding to T. Elementwise: a token's result does not depend on the other rows (batch-invariant).
// Numerics per T (engine/kernels/swiglu_math.cuh):
//   float (the fidelity mode): accurate expf, IEEE division and product in the reference's order, no
//     fast math: within a few fp32 ulp of ref::SwiGlu (CUDA's expf vs the host's).
//   bf16_t: fast intrinsics, __fdividef(g, 1 + __expf(-g)) * u. Before the rounding to bf16 the fp32
//     value is within 2^-16 relative of the exact one for |g| <= 87 (bf16's own rounding is 2^-8
//     relative, so the two differ only where a value sits next to a bf16 rounding tie: then by one bf16
//     ulp); for g < -87.3 the result is 0 where the exact value is below 1.1e-36 |up| in magnitude.
//
// gate and up are read with the same row stride in_stride (elements). For the fused gate|up GEMM output
// [num_tokens, 2 * intermediate_size] (gate in columns [0, I), up in [I, 2I)): gate = gate_up,
// up = gate_up + I, in_stride = 2 * I. For two separate [num_tokens, I] tensors: in_stride = I.
// out [num_tokens, intermediate_size] contiguous. out may alias gate (same stride required, i.e. only
// when in_stride == intermediate_size) or be a separate buffer; it must not alias up otherwise.
// Time: memory-bound, 3 x num_tokens x intermediate_size x sizeof(T) bytes; predicted ~0.70 ms for
// bf16 at 32768 x 14336 on an H200 (4.0 TB/s).
// dtypes: T in {bf16_t, float}. Errors: INVALID_ARGUMENT (shapes, null pointers), INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_SWIGLU_H_
#define SCORED_ENGINE_KERNELS_SWIGLU_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

template <typename T>
absl::Status SwiGlu(const T* gate,  // [num_tokens, in_stride], columns [0, intermediate_size)
                    const T* up,    // [num_tokens, in_stride], columns [0, intermediate_size)
                    int64_t in_stride, int64_t num_tokens, int64_t intermediate_size,
                    T* out,  // [num_tokens, intermediate_size]
                    cudaStream_t stream);

// GeGLU gate (Gemma's gelu_pytorch_tanh MLP): out[t, i] = T(gelu_tanh(gate[t, i]) * up[t, i]),
// gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))). Shapes, aliasing, speed and errors as
// SwiGlu. Numerics (swiglu_math.cuh GeluTanhGluMath): float as ref::GeluTanhGlu (the GELU in double, rounded
// once; the product in fp32); bf16_t in fp32 with tanhf, a few fp32 ulp before the rounding to bf16.
template <typename T>
absl::Status GeluTanhGlu(const T* gate,  // [num_tokens, in_stride], columns [0, intermediate_size)
                         const T* up,    // [num_tokens, in_stride], columns [0, intermediate_size)
                         int64_t in_stride, int64_t num_tokens, int64_t intermediate_size,
                         T* out,  // [num_tokens, intermediate_size]
                         cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_SWIGLU_H_

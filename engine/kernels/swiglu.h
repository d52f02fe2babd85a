// SwiGLU gate: out[t, i] = T(silu(gate[t, i]) * up[t, i]), silu(g) = g / (1 + expf(-g)), fp32 math
// (accurate expf, not fast-math), one rounding to T.
//
// gate and up are read with the same row stride in_stride (elements). For the fused gate|up GEMM output
// [num_tokens, 2 * intermediate_size] (gate in columns [0, I), up in [I, 2I)): gate = gate_up,
// up = gate_up + I, in_stride = 2 * I. For two separate [num_tokens, I] tensors: in_stride = I.
// out [num_tokens, intermediate_size] contiguous. out may alias gate (same stride required, i.e. only
// when in_stride == intermediate_size) or be a separate buffer; it must not alias up otherwise.
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
                    T* out,         // [num_tokens, intermediate_size]
                    cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_SWIGLU_H_

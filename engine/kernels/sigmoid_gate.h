// The attention output gate (Qwen3.5's gated attention, Qwen3_5Attention: attn_output * sigmoid(gate)), in
// place: x[t, j] = T(float(x[t, j]) * fp32(1 / (1 + exp(-double(gate[t, j]))))) for j < width, the sigmoid
// correctly rounded to fp32 from double and one fp32 product rounded once to T, as the CPU oracle's
// ReferenceEngine::AttentionBlock computes it (fp32 results bit for bit).
//
// x [num_tokens, x_stride], gate [num_tokens, gate_stride] (elements; width <= both strides): the attention
// output rows and the gate rows of the fused q|k|v|gate GEMM output. dtypes: T in {bf16_t, float}.
// Errors: INVALID_ARGUMENT (shapes, null pointers), INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_SIGMOID_GATE_H_
#define SCORED_ENGINE_KERNELS_SIGMOID_GATE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

template <typename T>
absl::Status SigmoidGateMul(T* x,  // [num_tokens, x_stride]
                            int64_t x_stride,
                            const T* gate,  // [num_tokens, gate_stride]
                            int64_t gate_stride, int64_t num_tokens, int64_t width, cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_SIGMOID_GATE_H_

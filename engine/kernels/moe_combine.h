// Mixture-of-experts combine on the GPU, the twin of ref::MoeCombine (engine/reference/ops.h): each token's
// experts added in fp32 in ascending expert id, by running the experts in that order and, after each,
//   MoeAccumulate: acc[slots[r] / top_k] = fp32(acc + fp32(y[r] * weights[slots[r]])) for r < rows
// (an expert takes a token at most once, so rows never collide), then
//   MoeFinish: residual[t] += fp32(acc[t] + fp32(sigmoid(gate[t]) * shared[t])) (shared / gate: Qwen2-MoE's
//   shared expert and its gate logit, else nullptr: residual[t] += acc[t]).
// Every operation one fp32 IEEE operation (no contraction): the oracle's order and rounding.
// Shapes: acc, y, residual, shared [*, hidden] fp32 contiguous; gate [num_tokens] with stride gate_stride
// (a column of the router's output). Errors: INVALID_ARGUMENT (shapes), INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_MOE_COMBINE_H_
#define SCORED_ENGINE_KERNELS_MOE_COMBINE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

absl::Status MoeAccumulate(const float* y,  // [rows, hidden]
                           const int32_t* slots, int64_t rows, int64_t top_k, const float* weights,
                           int64_t hidden,
                           float* acc,  // [num_tokens, hidden]
                           cudaStream_t stream);

absl::Status MoeFinish(const float* acc,     // [num_tokens, hidden]
                       const float* shared,  // [num_tokens, hidden] or nullptr
                       const float* gate, int64_t gate_stride, int64_t num_tokens, int64_t hidden,
                       float* residual,  // [num_tokens, hidden]
                       cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_MOE_COMBINE_H_

// Mixture-of-experts combine on the GPU, the twin of ref::MoeCombine (engine/reference/ops.h): each token's
// experts added in fp32 in ascending expert id, by running the experts in that order and, after each,
//   MoeAccumulate: acc[slots[r] / top_k] = fp32(acc + fp32(y[r] * weights[slots[r]])) for r < rows
// (an expert takes a token at most once, so rows never collide), then
//   MoeFinish: residual[t] += fp32(acc[t] + fp32(sigmoid(gate[t]) * shared[t])) (shared / gate: Qwen2-MoE's
//   shared expert and its gate logit; shared without a gate (nullptr): DeepSeek-V3's ungated shared experts,
//   residual[t] += fp32(acc[t] + shared[t]); neither: residual[t] += acc[t]).
// The grouped path (kernels/grouped_gemm.h) computes every expert's rows at once, y [num_slots, hidden] in
// the grouped order (experts ascending), and then
//   MoeCombineGroupedFinish: residual[t] = fp32(r + fp32(acc_t + fp32(sigmoid(gate[t]) * shared[t]))) (an
//   ungated shared expert, gate nullptr: fp32(r + fp32(acc_t + shared[t])); fp32(r + acc_t) without a shared
//   expert), r = residual[t] (accumulate) or +0 (not: tensor parallelism's
//   ranks but 0 write their partial sums over the residual), where acc_t = (((0 + fp32(y[row_0] * w_0)) +
//   fp32(y[row_1] * w_1)) + ...) over token t's top_k slots s = t * top_k + j, row_j = slot_rows[s] and
//   w_j = weights[s], taken in ascending row, which is ascending expert id (the rows are grouped by ascending
//   expert and an expert takes a token once): the adds of MoeAccumulate expert by expert into a zeroed acc
//   and then MoeFinish (over a zeroed residual where not accumulate), in their order, so bitwise their
//   result; with accumulate false and no shared expert, residual[t] = acc_t bitwise (acc_t is never -0: its
//   first add is to +0). top_k <= 64.
// Every operation one fp32 IEEE operation (no contraction): the oracle's order and rounding.
// The experts' outputs y are fp32 or bf16 (Y in {float, bf16_t}: the bf16 mode's experts write bf16 rows,
// as transformers' do); a bf16 value enters the sums widened exactly to fp32, so the contract above holds
// with y's values as stored.
// Shapes: y [*, hidden] contiguous; acc, residual, shared [*, hidden] fp32 contiguous; gate [num_tokens] with
// stride gate_stride (a column of the router's output), or nullptr (read only with shared). Errors:
// INVALID_ARGUMENT (shapes), INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_MOE_COMBINE_H_
#define SCORED_ENGINE_KERNELS_MOE_COMBINE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

template <typename Y>
absl::Status MoeAccumulate(const Y* y,  // [rows, hidden]
                           const int32_t* slots, int64_t rows, int64_t top_k, const float* weights,
                           int64_t hidden,
                           float* acc,  // [num_tokens, hidden]
                           cudaStream_t stream);

template <typename Y>
absl::Status MoeCombineGroupedFinish(const Y* y,                // [num_tokens * top_k, hidden], grouped rows
                                     const int32_t* slot_rows,  // [num_tokens * top_k]
                                     const float* weights,      // [num_tokens, top_k]
                                     int64_t num_tokens, int64_t top_k, int64_t hidden,
                                     const float* shared,  // [num_tokens, hidden] or nullptr
                                     const float* gate, int64_t gate_stride, bool accumulate,
                                     float* residual,  // [num_tokens, hidden]
                                     cudaStream_t stream);

absl::Status MoeFinish(const float* acc,     // [num_tokens, hidden]
                       const float* shared,  // [num_tokens, hidden] or nullptr
                       const float* gate, int64_t gate_stride, int64_t num_tokens, int64_t hidden,
                       float* residual,  // [num_tokens, hidden]
                       cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_MOE_COMBINE_H_

// Mixture-of-experts routing on the GPU: the twin of ref::MoeRoute (engine/reference/ops.h has the
// semantics). One warp per token: the softmax of the fp32 router logits with its max and sum of exp in double
// (the sum in the warp's fixed order: within a few ulp of double of the oracle's sequential sum, so the fp32
// probabilities agree but at rounding boundaries), the top_k largest by repeated warp arg-max (exactly equal
// probabilities: the lower expert id first), renormalized in double when asked.
// Shapes: router_logits [num_tokens, logits_stride] fp32 (columns [0, num_experts) are the experts';
// logits_stride >= num_experts leaves room for a shared-expert gate column). 1 <= top_k <= num_experts <=
// kMaxExperts. Errors: INVALID_ARGUMENT (shapes), INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_MOE_ROUTE_H_
#define SCORED_ENGINE_KERNELS_MOE_ROUTE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

inline constexpr int64_t kMaxExperts = 1024;

absl::Status MoeRoute(const float* router_logits,  // [num_tokens, logits_stride]
                      int64_t logits_stride, int64_t num_tokens, int64_t num_experts, int64_t top_k,
                      bool renormalize,
                      int32_t* expert_ids,    // [num_tokens, top_k], descending probability
                      float* expert_weights,  // [num_tokens, top_k]
                      cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_MOE_ROUTE_H_

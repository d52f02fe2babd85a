// Mixture-of-experts routing on the GPU: MoeRoute, the twin of ref::MoeRoute, and MoeRouteSigmoid, the twin
// of ref::MoeRouteSigmoid (engine/reference/ops.h has the semantics of both).
//
// MoeRoute: One warp per token: the softmax of the fp32 router logits with its max and sum of exp in double
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

// MoeRouteSigmoid: DeepSeek-V3's router (GLM-4.5, MiniMax-M2). One warp per token, as MoeRoute: each lane's
// experts' s = fp32(1 / (1 + exp(-double(l)))) and c = fp32(s + bias); with groups, each group's two largest
// c by a warp arg-max over the group's experts (repeated, exactly the oracle's fp32(c_1 + c_2)) and the
// topk_groups best groups by repeated arg-max (exactly equal scores: the lower group id); the experts of the
// other groups take c = -inf and are never chosen (top_k <= the kept experts); the top_k by repeated warp
// arg-max (exactly equal c: the lower id); lane 0 then sums the chosen s in double in selection order and
// writes weights fp32(s / fp32(fp32(sum) + renorm_epsilon)) when renormalize, times scaling_factor: the
// oracle's operations, so ids and weights are bitwise the oracle's but where the device's double exp and the
// host's round to different fp32 sigmoids (a few ulp of double; near-ties of c).
// Shapes: as MoeRoute; correction_bias [num_experts] fp32 on the device or nullptr; num_groups divides
// num_experts, groups of >= 2 experts, 1 <= topk_groups <= num_groups <= 32, top_k <= topk_groups *
// num_experts / num_groups. Errors: INVALID_ARGUMENT (shapes), INTERNAL (launch).
struct SigmoidRouting {
  const float* correction_bias = nullptr;  // [num_experts], device, or nullptr
  int64_t num_groups = 1, topk_groups = 1;
  bool renormalize = false;
  float renorm_epsilon = 0.0f;
  float scaling_factor = 1.0f;
};
inline constexpr int64_t kMaxRouterGroups = 32;

absl::Status MoeRouteSigmoid(const float* router_logits,  // [num_tokens, logits_stride]
                             int64_t logits_stride, int64_t num_tokens, int64_t num_experts, int64_t top_k,
                             const SigmoidRouting& routing,
                             int32_t* expert_ids,    // [num_tokens, top_k], descending choice
                             float* expert_weights,  // [num_tokens, top_k]
                             cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_MOE_ROUTE_H_

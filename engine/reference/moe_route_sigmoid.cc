// DeepSeek-V3's sigmoid router (contract: ops.h, MoeRouteSigmoid; semantics: ModelConfig in
// engine/model/config.h, transformers 5.17 deepseek_v3 DeepseekV3TopkRouter.forward, glm4_moe
// Glm4MoeTopkRouter.forward, minimax_m2 MiniMaxM2TopKRouter.forward). Every value is computed per token, from
// that token's logits only.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/reference/ops.h"

namespace scored::ref {

void MoeRouteSigmoid(const float* router_logits,  // [num_tokens, num_experts]
                     int64_t num_tokens, int64_t num_experts, int64_t top_k, const SigmoidRouting& routing,
                     int32_t* expert_ids,      // [num_tokens, top_k]
                     float* expert_weights) {  // [num_tokens, top_k]
  const int64_t groups = routing.num_groups, group_size = num_experts / groups;
  std::vector<float> s(static_cast<size_t>(num_experts)), c(static_cast<size_t>(num_experts));
  std::vector<float> group_score(static_cast<size_t>(groups));
  std::vector<int32_t> group_order(static_cast<size_t>(groups)), candidates;
  std::vector<bool> kept(static_cast<size_t>(groups), true);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* l = router_logits + t * num_experts;
    for (int64_t e = 0; e < num_experts; ++e) {
      s[e] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(l[e]))));
      c[e] = routing.correction_bias != nullptr ? s[e] + routing.correction_bias[e] : s[e];
    }
    if (groups > 1) {  // a group's score: the sum of its two largest choices
      for (int64_t g = 0; g < groups; ++g) {
        float first = -INFINITY, second = -INFINITY;
        for (int64_t e = g * group_size; e < (g + 1) * group_size; ++e) {
          if (c[e] > first) {
            second = first;
            first = c[e];
          } else if (c[e] > second) {
            second = c[e];
          }
        }
        group_score[g] = first + second;
      }
      std::iota(group_order.begin(), group_order.end(), 0);
      std::stable_sort(group_order.begin(), group_order.end(),
                       [&](int32_t a, int32_t b) { return group_score[a] > group_score[b]; });
      std::fill(kept.begin(), kept.end(), false);
      for (int64_t j = 0; j < routing.topk_groups; ++j) kept[group_order[j]] = true;
    }
    candidates.clear();  // the kept groups' experts, ascending id
    for (int64_t e = 0; e < num_experts; ++e) {
      if (kept[e / group_size]) candidates.push_back(static_cast<int32_t>(e));
    }
    // Top k by choice; equal choices: the lower expert id first (a stable sort of ascending ids).
    std::stable_sort(candidates.begin(), candidates.end(), [&](int32_t a, int32_t b) { return c[a] > c[b]; });
    double sum = 0.0;
    for (int64_t j = 0; j < top_k; ++j) sum += s[candidates[j]];
    const float denominator = static_cast<float>(sum) + routing.renorm_epsilon;
    for (int64_t j = 0; j < top_k; ++j) {
      float w = s[candidates[j]];  // the unbiased score
      if (routing.renormalize) w = w / denominator;
      expert_ids[t * top_k + j] = candidates[j];
      expert_weights[t * top_k + j] = w * routing.scaling_factor;
    }
  }
}

}  // namespace scored::ref

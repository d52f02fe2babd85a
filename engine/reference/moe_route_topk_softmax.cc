// gpt-oss's router (contract: ops.h MoeRouteTopKSoftmax; transformers 5.17 GptOssTopKRouter.forward). Every
// value is computed per token, from that token's logits only.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/reference/ops.h"

namespace scored::ref {

void MoeRouteTopKSoftmax(const float* router_logits,  // [num_tokens, num_experts]
                         int64_t num_tokens, int64_t num_experts, int64_t top_k,
                         int32_t* expert_ids,      // [num_tokens, top_k]
                         float* expert_weights) {  // [num_tokens, top_k]
  std::vector<int32_t> order(static_cast<size_t>(num_experts));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* l = router_logits + t * num_experts;
    // Top k by logit; equal logits: the lower expert id first (a stable sort of ids 0..E-1).
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    const float m = l[order[0]];
    double sum = 0.0;
    for (int64_t j = 0; j < top_k; ++j) sum += std::exp(static_cast<double>(l[order[j]] - m));
    for (int64_t j = 0; j < top_k; ++j) {
      expert_ids[t * top_k + j] = order[j];
      expert_weights[t * top_k + j] =
          static_cast<float>(std::exp(static_cast<double>(l[order[j]] - m)) / sum);
    }
  }
}

}  // namespace scored::ref

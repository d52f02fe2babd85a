// Mixture-of-experts routing and combine (contract: ops.h, MoeRoute / MoeCombine; semantics: ModelConfig in
// engine/model/config.h). Every value is computed per token, from that token's data only.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/reference/ops.h"

namespace scored::ref {

void MoeRoute(const float* router_logits,  // [num_tokens, num_experts]
              int64_t num_tokens, int64_t num_experts, int64_t top_k, bool renormalize,
              int32_t* expert_ids,      // [num_tokens, top_k]
              float* expert_weights) {  // [num_tokens, top_k]
  std::vector<float> probs(static_cast<size_t>(num_experts));
  std::vector<int32_t> order(static_cast<size_t>(num_experts));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* l = router_logits + t * num_experts;
    // Softmax: max subtracted, exp and sum in double, each probability rounded once to fp32.
    float m = l[0];
    for (int64_t e = 1; e < num_experts; ++e) m = std::max(m, l[e]);
    double sum = 0.0;
    for (int64_t e = 0; e < num_experts; ++e) sum += std::exp(static_cast<double>(l[e] - m));
    for (int64_t e = 0; e < num_experts; ++e) {
      probs[e] = static_cast<float>(std::exp(static_cast<double>(l[e] - m)) / sum);
    }
    // Top k by probability; equal probabilities: the lower expert id first (a stable sort of ids 0..E-1).
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
    double top_sum = 0.0;
    for (int64_t j = 0; j < top_k; ++j) top_sum += probs[order[j]];
    for (int64_t j = 0; j < top_k; ++j) {
      const float p = probs[order[j]];
      expert_ids[t * top_k + j] = order[j];
      expert_weights[t * top_k + j] = renormalize ? static_cast<float>(p / top_sum) : p;
    }
  }
}

void MoeCombine(const float* expert_out,      // [num_tokens, top_k, hidden_size]
                const int32_t* expert_ids,    // [num_tokens, top_k]
                const float* expert_weights,  // [num_tokens, top_k]
                int64_t num_tokens, int64_t top_k, int64_t hidden_size,
                const float* shared_out,   // [num_tokens, hidden_size] or nullptr
                const float* shared_gate,  // [num_tokens] or nullptr
                float* out) {              // [num_tokens, hidden_size]
  std::vector<int64_t> slots(static_cast<size_t>(top_k));
  for (int64_t t = 0; t < num_tokens; ++t) {
    // Ascending expert id: the order transformers' experts loop adds them in.
    std::iota(slots.begin(), slots.end(), 0);
    const int32_t* ids = expert_ids + t * top_k;
    std::sort(slots.begin(), slots.end(), [&](int64_t a, int64_t b) { return ids[a] < ids[b]; });
    float* o = out + t * hidden_size;
    std::fill(o, o + hidden_size, 0.0f);
    for (int64_t s : slots) {
      const float w = expert_weights[t * top_k + s];
      const float* y = expert_out + (t * top_k + s) * hidden_size;
      for (int64_t i = 0; i < hidden_size; ++i) o[i] += y[i] * w;  // fp32 product, fp32 sum
    }
    if (shared_out != nullptr && shared_gate != nullptr) {
      const float g = shared_gate[t];
      const float sigmoid = 1.0f / (1.0f + std::exp(-g));
      const float* y = shared_out + t * hidden_size;
      for (int64_t i = 0; i < hidden_size; ++i) o[i] += sigmoid * y[i];
    } else if (shared_out != nullptr) {  // ungated: DeepseekV3MoE's hidden_states + shared_experts(residuals)
      const float* y = shared_out + t * hidden_size;
      for (int64_t i = 0; i < hidden_size; ++i) o[i] += y[i];
    }
  }
}

}  // namespace scored::ref

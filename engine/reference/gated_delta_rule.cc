// The gated delta rule (Qwen3.5's Gated DeltaNet; transformers' torch_recurrent_gated_delta_rule, of which
// torch_chunk_gated_delta_rule is the chunked form of the same function), token by token, with the state and
// every reduction in double and each output rounded once to fp32.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/reference/ops.h"

namespace scored::ref {

void GatedDeltaRule(const float* q, const float* k, const float* v, const float* g, const float* beta,
                    int64_t num_tokens, int64_t num_k_heads, int64_t num_v_heads, int64_t k_dim,
                    int64_t v_dim, float* out) {
  const int64_t per_k = num_v_heads / num_k_heads;
  std::vector<double> state(k_dim * v_dim), kv(v_dim);  // S [k_dim, v_dim] of one v head
  for (int64_t h = 0; h < num_v_heads; ++h) {
    const int64_t kh = h / per_k;
    std::fill(state.begin(), state.end(), 0.0);
    for (int64_t t = 0; t < num_tokens; ++t) {
      const float* qt = q + (t * num_k_heads + kh) * k_dim;
      const float* kt = k + (t * num_k_heads + kh) * k_dim;
      const float* vt = v + (t * num_v_heads + h) * v_dim;
      const double decay = std::exp(static_cast<double>(g[t * num_v_heads + h]));
      const double b = beta[t * num_v_heads + h];
      for (double& s : state) s *= decay;
      // kv = S^T k; delta = beta (v - kv); S += k delta^T; o = S^T q.
      std::fill(kv.begin(), kv.end(), 0.0);
      for (int64_t i = 0; i < k_dim; ++i) {
        for (int64_t j = 0; j < v_dim; ++j) kv[j] += state[i * v_dim + j] * kt[i];
      }
      for (int64_t j = 0; j < v_dim; ++j) kv[j] = b * (vt[j] - kv[j]);
      for (int64_t i = 0; i < k_dim; ++i) {
        for (int64_t j = 0; j < v_dim; ++j) state[i * v_dim + j] += kt[i] * kv[j];
      }
      float* ot = out + (t * num_v_heads + h) * v_dim;
      for (int64_t j = 0; j < v_dim; ++j) {
        double o = 0.0;
        for (int64_t i = 0; i < k_dim; ++i) o += state[i * v_dim + j] * qt[i];
        ot[j] = static_cast<float>(o);
      }
    }
  }
}

}  // namespace scored::ref

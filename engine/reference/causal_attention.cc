// Causal grouped-query self-attention of one sequence, fp32 values with double reductions:
//   s[j] = fp32(dot(q[t, h], k[j, g]) * scale), dot in double, scale = 1 / sqrt(head_dim), j <= t
//   p[j] = expf(s[j] - max_j s[j])
//   out[t, h] = fp32(sum_j double(p[j]) * v[j, g] / sum_j double(p[j]))
// with kv head g = h / (num_heads / num_kv_heads). Work is split over (head, query) pairs, head-major, so
// threads get equal numbers of whole heads when they divide num_heads.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/reference/ops.h"
#include "engine/reference/thread_pool.h"

namespace scored::ref {

void CausalAttention(const float* q,  // [num_tokens, num_heads, head_dim]
                     const float* k,  // [num_tokens, num_kv_heads, head_dim]
                     const float* v,  // [num_tokens, num_kv_heads, head_dim]
                     int64_t num_tokens, int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
                     float* out,      // [num_tokens, num_heads, head_dim]
                     ThreadPool* pool) {
  const int64_t group = num_heads / num_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  ParallelFor(pool, num_heads * num_tokens, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(num_tokens);  // [num_tokens]
    std::vector<double> acc(head_dim);      // [head_dim]
    for (int64_t i = begin; i < end; ++i) {
      const int64_t h = i / num_tokens;
      const int64_t t = i % num_tokens;
      const int64_t g = h / group;
      const float* qv = q + (t * num_heads + h) * head_dim;
      float max_score = -INFINITY;
      for (int64_t j = 0; j <= t; ++j) {
        const float* kv = k + (j * num_kv_heads + g) * head_dim;
        double dot = 0.0;
        for (int64_t d = 0; d < head_dim; ++d) dot += static_cast<double>(qv[d]) * kv[d];
        scores[j] = static_cast<float>(dot * scale);
        max_score = std::max(max_score, scores[j]);
      }
      double sum = 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j <= t; ++j) {
        const float p = std::exp(scores[j] - max_score);
        sum += p;
        const float* vv = v + (j * num_kv_heads + g) * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) acc[d] += static_cast<double>(p) * vv[d];
      }
      float* o = out + (t * num_heads + h) * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) o[d] = static_cast<float>(acc[d] / sum);
    }
  });
}

}  // namespace scored::ref

// DeepSeek-V3's multi-head latent attention, the naive form (ops.h LatentAttention): every head's key is its
// k_nope with the one shared k_rope appended, its value its own v; then CausalAttention's arithmetic. The
// heads are widened with zeros to width = max(qk_head_dim, v_head_dim) so that one attention call serves
// both widths: a zero term leaves a double sum unchanged (x + 0 == x), so every score and every output
// element is exactly what the unpadded arithmetic gives, and the padded output columns are dropped.
#include <algorithm>
#include <vector>

#include "engine/reference/ops.h"

namespace scored::ref {

void LatentAttention(const float* q,       // [num_tokens, num_heads, qk_nope_head_dim + qk_rope_head_dim]
                     const float* kv,      // [num_tokens, num_heads, qk_nope_head_dim + v_head_dim]
                     const float* k_rope,  // [num_tokens, qk_rope_head_dim]
                     int64_t num_tokens, const LatentAttentionShape& shape, double scale,
                     float* out,  // [num_tokens, num_heads, v_head_dim]
                     ThreadPool* pool) {
  const int64_t heads = shape.num_heads, nope = shape.qk_nope_head_dim, rope = shape.qk_rope_head_dim;
  const int64_t vd = shape.v_head_dim, qk = nope + rope, width = std::max(qk, vd);
  const int64_t rows = num_tokens * heads;
  std::vector<float> qp(rows * width, 0.0f), kp(rows * width, 0.0f), vp(rows * width, 0.0f);
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t r = t * heads + h;
      std::copy_n(q + r * qk, qk, qp.data() + r * width);
      std::copy_n(kv + r * (nope + vd), nope, kp.data() + r * width);
      std::copy_n(k_rope + t * rope, rope, kp.data() + r * width + nope);
      std::copy_n(kv + r * (nope + vd) + nope, vd, vp.data() + r * width);
    }
  }
  std::vector<float> o(rows * width);  // [num_tokens, num_heads, width]
  AttentionOptions options;
  options.scale = scale;
  CausalAttention(qp.data(), kp.data(), vp.data(), num_tokens, heads, heads, width, o.data(), pool, options);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(o.data() + r * width, vd, out + r * vd);
}

}  // namespace scored::ref

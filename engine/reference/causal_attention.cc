// Causal grouped-query self-attention of one sequence, fp32 values with double reductions:
//   s[j] = fp32(dot(q[t, h], k[j, g]) * scale), dot over d ascending in double, scale = 1 / sqrt(head_dim)
//   (or AttentionOptions::scale); with a soft cap c: s[j] = fp32(fp32(tanh(fp32(s[j] / c))) * c); with a
//   window w only the keys j > t - w take part
//   p[j] = exp(s[j] - max_{j <= t} s[j]) rounded to fp32 (ExpToFloat, fast_exp.h),  j <= t
//   out[t, h, d] = fp32(LaneSum_j(double(p[j]) * v[j, g, d]) / LaneSum_j(double(p[j])))
// With sinks (gpt-oss) head h's sink logit joins the max, and its ExpToFloat(sink - max) the denominator,
// added after the lane sum.
// with kv head g = h / (num_heads / num_kv_heads). LaneSum adds term j into partial sum j % 8 and combines
// the 8 partials in a fixed tree: a fixed order (so values never depend on threads or instruction set)
// that vectorizes; a double sum of positive terms is accurate to ~1e-15 relative in any order.
// K and V of each kv head are first transposed to [head_dim, num_tokens] so both loops run over
// contiguous j. Work is split over (head, query) pairs, head-major, so threads get equal numbers of
// whole heads when they divide num_heads.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/reference/fast_exp.h"
#include "engine/reference/multiversion.h"
#include "engine/reference/ops.h"
#include "engine/reference/thread_pool.h"

namespace scored::ref {
namespace {

constexpr int64_t kLanes = 8;

double CombineLanes(const double (&lanes)[kLanes]) {
  return ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
}

// LaneSum_j double(a[j]) * double(b[j]), j < n.
SCORED_REF_MULTIVERSION
double LaneDot(const float* a, const float* b, int64_t n) {
  double lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l)
      lanes[l] += static_cast<double>(a[j + l]) * static_cast<double>(b[j + l]);
  }
  for (int64_t l = 0; j + l < n; ++l)
    lanes[l] += static_cast<double>(a[j + l]) * static_cast<double>(b[j + l]);
  return CombineLanes(lanes);
}

// probs[j] = ExpToFloat(probs[j] - max_score), j < n; returns LaneSum_j double(probs[j]).
SCORED_REF_MULTIVERSION
double ExpShiftedSum(float* probs, int64_t n, float max_score) {
  for (int64_t j = 0; j < n; ++j) probs[j] = ExpToFloat(probs[j] - max_score);
  double lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += static_cast<double>(probs[j + l]);
  }
  for (int64_t l = 0; j + l < n; ++l) lanes[l] += static_cast<double>(probs[j + l]);
  return CombineLanes(lanes);
}

// dots[j] = sum_{d ascending} double(q[d]) * double(kt[d, j]) for j < n.
SCORED_REF_MULTIVERSION
void QueryKeyDots(const float* q,   // [head_dim]
                  const float* kt,  // [head_dim, ld]
                  int64_t ld, int64_t head_dim, int64_t n,
                  double* dots) {  // [n]
  std::fill(dots, dots + n, 0.0);
  for (int64_t d = 0; d < head_dim; ++d) {
    const double qd = q[d];
    const float* row = kt + d * ld;
    for (int64_t j = 0; j < n; ++j) dots[j] += qd * static_cast<double>(row[j]);
  }
}

// scores[j] = fp32(dots[j] * scale), j < n; returns max_j scores[j] (a maximum is exact in any order).
SCORED_REF_MULTIVERSION
float ScaleScores(const double* dots, int64_t n, double scale, float* scores) {
  float lane_max[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) lane_max[l] = -INFINITY;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) {
      const float s = static_cast<float>(dots[j + l] * scale);
      scores[j + l] = s;
      lane_max[l] = s > lane_max[l] ? s : lane_max[l];
    }
  }
  for (int64_t l = 0; j + l < n; ++l) {
    const float s = static_cast<float>(dots[j + l] * scale);
    scores[j + l] = s;
    lane_max[l] = s > lane_max[l] ? s : lane_max[l];
  }
  float max_score = lane_max[0];
  for (int64_t l = 1; l < kLanes; ++l) max_score = std::max(max_score, lane_max[l]);
  return max_score;
}

// scores[j] = fp32(tanh(fp32(scores[j] / cap)) * cap) (Gemma 2's attention-logit soft-capping, tanh in
// double rounded once); returns the new maximum.
float CapScores(float* scores, int64_t n, float cap) {
  float max_score = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    const float x = scores[j] / cap;
    scores[j] = static_cast<float>(std::tanh(static_cast<double>(x))) * cap;
    max_score = std::max(max_score, scores[j]);
  }
  return max_score;
}

// out[g, d, j] = in[j, g, d].
void TransposeHeads(const float* in,  // [num_tokens, num_kv_heads, head_dim]
                    int64_t num_tokens, int64_t num_kv_heads, int64_t head_dim,
                    float* out) {  // [num_kv_heads, head_dim, num_tokens]
  for (int64_t j = 0; j < num_tokens; ++j)
    for (int64_t g = 0; g < num_kv_heads; ++g)
      for (int64_t d = 0; d < head_dim; ++d)
        out[(g * head_dim + d) * num_tokens + j] = in[(j * num_kv_heads + g) * head_dim + d];
}

}  // namespace

void CausalAttention(const float* q,  // [num_tokens, num_heads, head_dim]
                     const float* k,  // [num_tokens, num_kv_heads, head_dim]
                     const float* v,  // [num_tokens, num_kv_heads, head_dim]
                     int64_t num_tokens, int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
                     float* out,  // [num_tokens, num_heads, head_dim]
                     ThreadPool* pool, const AttentionOptions& options) {
  const int64_t group = num_heads / num_kv_heads;
  const double scale = options.scale > 0.0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  const float cap = options.softcap;
  std::vector<float> kt(num_kv_heads * head_dim * num_tokens);  // [num_kv_heads, head_dim, num_tokens]
  std::vector<float> vt(num_kv_heads * head_dim * num_tokens);  // [num_kv_heads, head_dim, num_tokens]
  TransposeHeads(k, num_tokens, num_kv_heads, head_dim, kt.data());
  TransposeHeads(v, num_tokens, num_kv_heads, head_dim, vt.data());
  // A (head, query) pair costs ~num_tokens * head_dim multiply-adds on average (2 products, half the keys).
  const int64_t grain = GrainFor(num_tokens * head_dim);
  ParallelFor(
      pool, num_heads * num_tokens,
      [&](int64_t begin, int64_t end) {
        std::vector<double> dots(num_tokens);  // [num_tokens]
        std::vector<float> probs(num_tokens);  // [num_tokens]
        for (int64_t i = begin; i < end; ++i) {
          const int64_t h = i / num_tokens;
          const int64_t t = i % num_tokens;
          const int64_t g = h / group;
          // keys j0..t: all of them, or the last `window` (transformers: kv_idx > q_idx - window)
          const int64_t j0 = options.window > 0 ? std::max<int64_t>(0, t - options.window + 1) : 0;
          const int64_t n = t + 1 - j0;
          const float* kt_g = kt.data() + g * head_dim * num_tokens + j0;
          const float* vt_g = vt.data() + g * head_dim * num_tokens + j0;
          QueryKeyDots(q + (t * num_heads + h) * head_dim, kt_g, num_tokens, head_dim, n, dots.data());
          float max_score = ScaleScores(dots.data(), n, scale, probs.data());
          if (cap > 0.0f) max_score = CapScores(probs.data(), n, cap);
          const float* sink = options.sinks != nullptr ? options.sinks + h : nullptr;
          if (sink != nullptr) max_score = std::max(max_score, *sink);
          double sum = ExpShiftedSum(probs.data(), n, max_score);
          if (sink != nullptr) sum += static_cast<double>(ExpToFloat(*sink - max_score));
          float* o = out + (t * num_heads + h) * head_dim;
          for (int64_t d = 0; d < head_dim; ++d) {
            o[d] = static_cast<float>(LaneDot(probs.data(), vt_g + d * num_tokens, n) / sum);
          }
        }
      },
      grain);
}

}  // namespace scored::ref

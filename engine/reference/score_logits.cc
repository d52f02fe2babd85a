// Per-position scoring of one row of fp32 logits (DESIGN.md §3), in double:
//   m = max logit; S = sum_j exp(l_j - m); lse = m + log S; logprob = l_target - lse;
//   entropy = log S - sum_j exp(l_j - m) (l_j - m) / S; rank = 1 + #{l_j > l_target};
//   greedy = (first index of the max == target); top-k by (logit desc, id asc), logprob = fp32(l - lse);
//   candidates fp32(l_id - lse); min_logprob = fp32(min_j l_j - lse).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "engine/reference/ops.h"

namespace scored::ref {

TokenScore ScoreLogits(const float* logits,  // [vocab_size]
                       int64_t vocab_size, int32_t target, int32_t top_k, bool want_rank, bool want_entropy,
                       const int32_t* candidate_ids, int32_t num_candidates, bool want_min_logprob) {
  int64_t argmax = 0;
  float min_logit = logits[0];
  for (int64_t j = 1; j < vocab_size; ++j) {
    if (logits[j] > logits[argmax]) argmax = j;
    min_logit = std::min(min_logit, logits[j]);
  }
  const double max_logit = logits[argmax];
  double sum_exp = 0.0;
  double sum_exp_shifted = 0.0;  // sum_j exp(l_j - m) * (l_j - m), for the entropy
  for (int64_t j = 0; j < vocab_size; ++j) {
    const double shifted = static_cast<double>(logits[j]) - max_logit;
    const double e = std::exp(shifted);
    sum_exp += e;
    sum_exp_shifted += e * shifted;
  }
  const double log_sum = std::log(sum_exp);
  const double lse = max_logit + log_sum;

  TokenScore score;
  score.logprob = static_cast<double>(logits[target]) - lse;
  score.greedy = argmax == target;
  if (want_rank) {
    int32_t larger = 0;
    for (int64_t j = 0; j < vocab_size; ++j) larger += logits[j] > logits[target] ? 1 : 0;
    score.rank = 1 + larger;
  }
  if (want_entropy) score.entropy = log_sum - sum_exp_shifted / sum_exp;
  if (want_min_logprob) score.min_logprob = static_cast<float>(static_cast<double>(min_logit) - lse);
  score.candidate_logprob.resize(num_candidates);
  for (int32_t c = 0; c < num_candidates; ++c) {
    const int32_t id = candidate_ids[c];
    score.candidate_logprob[c] = id >= 0 && id < vocab_size
                                     ? static_cast<float>(static_cast<double>(logits[id]) - lse)
                                     : std::numeric_limits<float>::quiet_NaN();
  }
  if (top_k > 0) {
    const int64_t k = std::min<int64_t>(top_k, vocab_size);
    std::vector<int32_t> ids(vocab_size);
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [logits](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    score.top_k.reserve(k);
    for (int64_t i = 0; i < k; ++i) {
      score.top_k.push_back({ids[i], static_cast<float>(static_cast<double>(logits[ids[i]]) - lse)});
    }
  }
  return score;
}

}  // namespace scored::ref

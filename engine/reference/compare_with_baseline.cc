// One scored position of a model Q against its reference R (issue 17): R's logprob of the target,
// KL(P_R || P_Q) over the full vocabulary, R's greedy flag and top-1 agreement, all reductions in double:
//   lse_X = m_X + log sum_i exp(l_X(i) - m_X);  kld = sum_i p_R(i) ((l_R(i) - l_Q(i)) - (lse_R - lse_Q)).
// Each term is formed before it is summed (rather than sum_i p_R(i) (l_R(i) - l_Q(i)) - (lse_R - lse_Q)) so
// that no two log-normalizers near 20 cancel after the sum, and so that Q == R gives exactly 0.
#include <algorithm>
#include <cmath>

#include "engine/reference/ops.h"

namespace scored::ref {
namespace {

// The first index of the largest logit (lowest id on ties), as ScoreLogits.
int64_t Argmax(const float* logits, int64_t vocab_size) {
  int64_t argmax = 0;
  for (int64_t j = 1; j < vocab_size; ++j) {
    if (logits[j] > logits[argmax]) argmax = j;
  }
  return argmax;
}

double LogSumExp(const float* logits, int64_t vocab_size, int64_t argmax) {
  const double max_logit = logits[argmax];
  double sum_exp = 0.0;
  for (int64_t j = 0; j < vocab_size; ++j) sum_exp += std::exp(static_cast<double>(logits[j]) - max_logit);
  return max_logit + std::log(sum_exp);
}

}  // namespace

BaselineComparison CompareWithBaseline(const float* ref_logits,    // [vocab_size]
                                       const float* model_logits,  // [vocab_size]
                                       int64_t vocab_size, int32_t target) {
  const int64_t argmax_r = Argmax(ref_logits, vocab_size);
  const int64_t argmax_q = Argmax(model_logits, vocab_size);
  const double lse_r = LogSumExp(ref_logits, vocab_size, argmax_r);
  const double lse_q = LogSumExp(model_logits, vocab_size, argmax_q);
  const double lse_diff = lse_r - lse_q;
  double kld = 0.0;
  for (int64_t j = 0; j < vocab_size; ++j) {
    const double lr = ref_logits[j];
    const double d = (lr - static_cast<double>(model_logits[j])) - lse_diff;
    kld += std::exp(lr - lse_r) * d;
  }
  BaselineComparison c;
  c.ref_logprob = static_cast<double>(ref_logits[target]) - lse_r;
  c.kld = std::max(0.0, kld);
  c.ref_greedy = argmax_r == target;
  c.same_top = argmax_r == argmax_q;
  return c;
}

}  // namespace scored::ref

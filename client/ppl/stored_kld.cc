#include "client/ppl/stored_kld.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace scored {
namespace ppl {

KldBound StoredPositionKld(absl::Span<const float> ref_top_logprobs, absl::Span<const float> q_logprobs,
                           double ref_entropy, double tail_mass, double q_min_logprob) {
  double top = 0.0, q_mass = 0.0, top_entropy = 0.0;
  for (size_t i = 0; i < ref_top_logprobs.size(); ++i) {
    const double r = ref_top_logprobs[i], q = q_logprobs[i];
    const double p = std::exp(r);
    top += p * (r - q);
    top_entropy -= p * r;
    q_mass += std::exp(q);
  }
  KldBound b;
  if (tail_mass <= 0.0) {
    b.estimate = b.lower = b.upper = std::max(0.0, top);
    return b;
  }
  const double q_tail = std::max(1.0 - q_mass, std::numeric_limits<double>::min());
  const double log_sum = tail_mass * std::log(tail_mass / q_tail);
  const double tail_upper = (top_entropy - ref_entropy) - tail_mass * q_min_logprob;
  b.upper = std::max(0.0, top + tail_upper);
  b.lower = std::min(b.upper, std::max(0.0, top + log_sum));
  b.estimate = b.lower;
  return b;
}

absl::Status CompareWithStored(const ReferenceWindow& reference, absl::Span<const float> q_candidates,
                               absl::Span<const float> q_min_logprob, absl::Span<const int32_t> q_argmax,
                               StoredComparison* out) {
  const size_t n = static_cast<size_t>(reference.num_scored), k = static_cast<size_t>(reference.k);
  if (q_candidates.size() != n * k || q_min_logprob.size() != n || q_argmax.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("window ", reference.window, ": the reference holds ", n, " positions of ", k,
                     " ids but Q's answer has ", q_candidates.size(), " candidate logprobs, ",
                     q_min_logprob.size(), " min logprobs and ", q_argmax.size(), " top ids"));
  }
  out->ref_logprobs = reference.logprob;
  out->kld.resize(n);
  out->kld_lower.resize(n);
  out->kld_upper.resize(n);
  out->same_top.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const KldBound b = StoredPositionKld(absl::MakeConstSpan(reference.top_logprobs).subspan(i * k, k),
                                         q_candidates.subspan(i * k, k), reference.entropy[i],
                                         reference.tail_mass[i], q_min_logprob[i]);
    out->kld[i] = static_cast<float>(b.estimate);
    out->kld_lower[i] = static_cast<float>(b.lower);
    out->kld_upper[i] = static_cast<float>(b.upper);
    out->same_top[i] = reference.top_ids[i * k] == q_argmax[i] ? 1 : 0;
  }
  return absl::OkStatus();
}

}  // namespace ppl
}  // namespace scored

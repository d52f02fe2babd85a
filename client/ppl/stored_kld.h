// KL(P_R || P_Q) of one scored position from a stored reference (client/ppl/reference_file.h: R's target
// logprob, entropy H_R, its top-K set T with log-probabilities r_i and the mass m_R = 1 - sum_T p_R left out)
// and what Q's server returns for the same position (Score with candidate_ids = R's top-K ids and
// want_min_logprob): q_i = log P_Q(i) for i in T and l = min_x log P_Q(x) over the whole vocabulary.
//
// Split the sum over the vocabulary into T and the tail U (the ids R's file does not hold):
//   KL = top + tail,  top = sum_T p_R(i) (r_i - q_i)                          (exact from the stored data)
//   tail = sum_U p_R(x) log(p_R(x) / p_Q(x)),  with m_R = sum_U p_R, m_Q = 1 - sum_T p_Q = sum_U p_Q.
// Lower bound (the log-sum inequality): tail >= m_R log(m_R / m_Q), equality when Q's tail is proportional
//   to R's (p_Q(x) = p_R(x) m_Q / m_R on U).
// Upper bound: tail = sum_U p_R log p_R - sum_U p_R log p_Q, where sum_U p_R log p_R = -(H_R - H_T) with
//   H_T = -sum_T p_R(i) r_i is exact from the stored entropy, and -sum_U p_R log p_Q <= -m_R l because every
//   log p_Q(x) >= l: tail <= (H_T - H_R) - m_R l. This is the best bound these data give: nothing stored says
//   where in U R's tail mass lies, and it may lie on Q's least likely ids. Its width, (H_T - H_R) - m_R l -
//   m_R log(m_R / m_Q), shrinks with m_R, i.e. with K (0 when K is the vocabulary: then U is empty, m_R = 0
//   and KL = top exactly).
// Reported: upper = max(0, top + (H_T - H_R) - m_R l), lower = min(upper, max(0, top + m_R log(m_R / m_Q)))
// and estimate = lower (Q's tail taken proportional to R's); all three are `top` when m_R = 0. In double from
// the stored floats, whose rounding (~1e-7 relative) is the only error where the data determine KL. m_Q is a
// difference near 1 - 1: where rounding leaves it <= 0 it is taken as the smallest positive double, and the
// upper bound (which does not use m_Q) caps the lower one.
//
// Exact from the stored data (no bound needed): R's logprob of the target (so PPL(R), ln(PPL(Q)/PPL(R)), the
// NLL correlation, delta p and |delta logprob|) and same top (R's argmax is its top-K's entry 0 under the
// Score contract's tie rule, compared with Q's top-1 id).
// Thread-safety: stateless functions.
#ifndef SCORED_CLIENT_PPL_STORED_KLD_H_
#define SCORED_CLIENT_PPL_STORED_KLD_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/ppl/reference_file.h"

namespace scored {
namespace ppl {

struct KldBound {
  double estimate = 0.0;
  double lower = 0.0;
  double upper = 0.0;
};

// One position: ref_top_logprobs and q_logprobs [k] (Q's at R's top-k ids, in the same order), R's entropy
// and tail mass, Q's min logprob over the vocabulary.
KldBound StoredPositionKld(absl::Span<const float> ref_top_logprobs, absl::Span<const float> q_logprobs,
                           double ref_entropy, double tail_mass, double q_min_logprob);

// A window's comparison: per scored position the bound, same top, R's logprob (from the file).
struct StoredComparison {
  std::vector<float> ref_logprobs;  // [n]
  std::vector<float> kld;           // [n] estimates
  std::vector<float> kld_lower;     // [n]
  std::vector<float> kld_upper;     // [n]
  std::vector<uint8_t> same_top;    // [n]
};

// `reference` (one window of the file) against Q's answer for the same window: q_candidates [n, k] (Q's
// logprobs at the window's top ids), q_min_logprob [n], q_argmax [n] (Q's top-1 id). INVALID_ARGUMENT when
// the sizes disagree.
absl::Status CompareWithStored(const ReferenceWindow& reference, absl::Span<const float> q_candidates,
                               absl::Span<const float> q_min_logprob, absl::Span<const int32_t> q_argmax,
                               StoredComparison* out);

}  // namespace ppl
}  // namespace scored

#endif  // SCORED_CLIENT_PPL_STORED_KLD_H_

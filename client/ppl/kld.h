// Comparison of the served model Q with the server's reference model R over the scored positions of a
// scored-ppl --kld run (issue 17): the statistics llama-perplexity's KL-divergence mode prints, under its
// names, computed from the per-token values ScoreResponse carries with want_reference.
//
// Per scored token t (natural logs): nll_Q = -logprob_Q(t), nll_R = -logprob_R(t), kld = KL(P_R || P_Q)
// (nats, from the server), same_top = Q's and R's argmax agree, dp = exp(logprob_Q) - exp(logprob_R),
// dlp = logprob_Q - logprob_R. Over n tokens, with mean(x) = sum(x) / n and the population variance
// var(x) = mean(x^2) - mean(x)^2, the "mean and error" of x is (mean(x), sqrt(var(x) / (n - 1))) when
// var(x) > 0 and n > 10, else (mean(x), 0) -- llama-perplexity's convention. Then:
//   ln(PPL(Q)/PPL(R)) = mean(nll_Q) - mean(nll_R),  error sqrt(eQ^2 + eR^2 - 2 cov), where eQ / eR are
//                       the errors of mean(nll_Q) / mean(nll_R) and cov = (mean(nll_Q nll_R) -
//                       mean(nll_Q) mean(nll_R)) / (n - 1) (0 when n < 10): the covariance of the two means
//   correlation       = cov / (eQ eR): Pearson's correlation of the per-token NLLs (NaN when an error is 0)
//   PPL(Q), PPL(R)    = exp(mean(nll)), errors PPL * e (first order)
//   mean KLD          = mean and error of kld
//   KLD percentiles   = of the n values sorted ascending v[0] <= ... <= v[n-1]: the fraction f's percentile
//                       is linear interpolation at position f (n - 1): with i = floor(f (n - 1)) and
//                       r = f (n - 1) - i, (1 - r) v[i] + r v[min(i + 1, n - 1)]; max = v[n-1], min = v[0],
//                       median = f 0.5 (the mean of the two middle values when n is even)
//   same top p        = n_same_top / n, error sqrt(p (1 - p) / (n - 1)) (0 when n < 2)
//   mean delta p      = mean and error of dp
//   RMS delta p       = sqrt(m), m = mean(dp^2); error 0.5 / sqrt(m) * (error of mean(dp^2), from dp^4)
//   |delta logprob|   = mean and max of |dlp|
// Every sum is accumulated in double. PPL(Q) and PPL(R) of the report use the server's double sums
// (sum_logprob / sum_ref_logprob) for the means, the per-token floats for everything else; the two means
// agree to float rounding.
//
// A stored reference (--kld --reference_file, client/ppl/stored_kld.h) gives the same statistics, each
// token's R logprob and same top exact, its KLD an estimate within bounds [lower, upper]: the mean and the
// percentiles of the estimates are reported with the mean and the same percentiles of the lower and of the
// upper bounds, which bound them (order statistics are monotone: lower <= kld <= upper token by token keeps
// every percentile between those of the bounds). The KLD error is the estimates'.
//
// Thread-safety: KldAggregator is not thread-safe (one owner adds windows); KldStats is a plain value.
#ifndef SCORED_CLIENT_PPL_KLD_H_
#define SCORED_CLIENT_PPL_KLD_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace ppl {

// (mean, error) of n values from their sum and sum of squares, llama-perplexity's convention (above).
std::pair<double, double> MeanAndError(double sum, double sum2, int64_t n);
// The percentile at `fraction` in [0, 1] of ascending `sorted` (non-empty), by the interpolation above.
double Percentile(absl::Span<const float> sorted, double fraction);

// The fractions of the KLD percentiles reported, largest first: max, 99.9 %, ..., 0.1 %, min.
inline constexpr double kKldPercentiles[] = {1.0, 0.999, 0.99, 0.95, 0.9, 0.5, 0.1, 0.05, 0.01, 0.001, 0.0};

struct KldStats {
  int64_t count = 0;
  double ppl_q = 0.0, ppl_q_error = 0.0;
  double ppl_r = 0.0, ppl_r_error = 0.0;
  double ln_ppl_ratio = 0.0, ln_ppl_ratio_error = 0.0;  // ln(PPL(Q)/PPL(R))
  double ppl_ratio = 0.0, ppl_ratio_error = 0.0;        // PPL(Q)/PPL(R)
  double nll_correlation = 0.0;                         // Cor(nll_Q, nll_R), in [-1, 1]
  double kld_mean = 0.0, kld_error = 0.0;
  std::vector<double> kld_percentiles;          // one per kKldPercentiles fraction, same order
  double same_top = 0.0, same_top_error = 0.0;  // fractions (0.97 = 97 %)
  double dp_mean = 0.0, dp_error = 0.0;         // probabilities (0.01 = 1 %)
  double dp_rms = 0.0, dp_rms_error = 0.0;
  double dlp_abs_mean = 0.0, dlp_abs_max = 0.0;  // nats
  // A stored reference only (AddKldBounds): the bounds of kld_mean and of each kld_percentiles entry, and the
  // mean probability R's stored top-K left out (the tail the bounds are about).
  bool kld_bounded = false;
  double kld_mean_lower = 0.0, kld_mean_upper = 0.0;
  std::vector<double> kld_percentiles_lower, kld_percentiles_upper;
  double tail_mass_mean = 0.0;
  int32_t reference_top_k = 0;  // K of the stored reference
};

class KldAggregator {
 public:
  // Adds one window's scored positions (all spans of one size: the number of scored positions) and the
  // server's double sums of Q's and R's logprobs. INVALID_ARGUMENT when the sizes differ.
  absl::Status AddWindow(double sum_logprob, double sum_ref_logprob, absl::Span<const float> logprobs,
                         absl::Span<const float> ref_logprobs, absl::Span<const float> kld,
                         absl::Span<const uint8_t> same_top);

  // A stored reference: the per-token KLD bounds of the window AddWindow just added (its kld values are the
  // estimates) and the sum of its positions' tail masses. INVALID_ARGUMENT when the sizes differ from it.
  absl::Status AddKldBounds(absl::Span<const float> lower, absl::Span<const float> upper,
                            double sum_tail_mass);
  void set_reference_top_k(int32_t k) { reference_top_k_ = k; }

  int64_t count() const { return count_; }
  // The statistics (count 0: every field 0, percentiles empty). Sorts a copy of the per-token KLDs.
  KldStats Finish() const;

 private:
  int64_t count_ = 0;
  double server_sum_logprob_ = 0.0, server_sum_ref_logprob_ = 0.0;
  double sum_nll_ = 0.0, sum_nll2_ = 0.0;
  double sum_nll_ref_ = 0.0, sum_nll_ref2_ = 0.0, sum_nll_nll_ref_ = 0.0;
  double sum_kld_ = 0.0, sum_kld2_ = 0.0;
  double sum_dp_ = 0.0, sum_dp2_ = 0.0, sum_dp4_ = 0.0;
  double sum_dlp_abs_ = 0.0, max_dlp_abs_ = 0.0;
  int64_t n_same_top_ = 0;
  std::vector<float> kld_values_;  // every per-token KLD, for the percentiles (4 bytes a token)
  // AddKldBounds: the same for the bounds (8 bytes a token more).
  bool bounded_ = false;
  double sum_lower_ = 0.0, sum_upper_ = 0.0, sum_tail_mass_ = 0.0;
  std::vector<float> lower_values_, upper_values_;
  int32_t reference_top_k_ = 0;
};

// The statistics as a JSON object (keys in kld.cc; NaN values become null) and as text lines under
// llama-perplexity's labels. A stored reference's adds "kld_source": "stored" (absent otherwise), the bounds
// ("kld_mean_lower" / "_upper", "kld_percentiles_lower" / "_upper"), "tail_mass_mean", "reference_top_k" and
// the lists "exact" and "estimated" of the statistics' keys; its text prints each bound beside its estimate
// and says which statistics are exact.
nlohmann::json KldStatsToJson(const KldStats& stats);
std::string KldStatsToText(const KldStats& stats);

}  // namespace ppl
}  // namespace scored

#endif  // SCORED_CLIENT_PPL_KLD_H_

#include "client/ppl/kld.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace scored {
namespace ppl {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

nlohmann::json NumberOrNull(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

// llama-perplexity's covariance of two means: 0 below 10 values.
double CovarianceOfMeans(double sum_a, double sum_b, double sum_ab, int64_t n) {
  if (n < 10) return 0.0;
  const double count = static_cast<double>(n);
  return (sum_ab / count - (sum_a / count) * (sum_b / count)) / (count - 1.0);
}

// "99.9%" style label of a percentile fraction; "Maximum" / "Median" / "Minimum" for 1, 0.5 and 0.
std::string PercentileLabel(double fraction) {
  if (fraction == 1.0) return "Maximum";
  if (fraction == 0.5) return "Median";
  if (fraction == 0.0) return "Minimum";
  return absl::StrFormat("%.1f%%", 100.0 * fraction);
}

// JSON key of a percentile fraction: "max", "p99.9", ..., "median", ..., "p0.1", "min".
std::string PercentileKey(double fraction) {
  if (fraction == 1.0) return "max";
  if (fraction == 0.5) return "median";
  if (fraction == 0.0) return "min";
  return absl::StrFormat("p%g", 100.0 * fraction);
}

}  // namespace

std::pair<double, double> MeanAndError(double sum, double sum2, int64_t n) {
  if (n < 1) return {0.0, 0.0};
  const double count = static_cast<double>(n);
  const double mean = sum / count;
  const double variance = sum2 / count - mean * mean;
  const double error = variance > 0.0 && n > 10 ? std::sqrt(variance / (count - 1.0)) : 0.0;
  return {mean, error};
}

double Percentile(absl::Span<const float> sorted, double fraction) {
  if (fraction <= 0.0) return sorted.front();
  if (fraction >= 1.0) return sorted.back();
  const double position = fraction * static_cast<double>(sorted.size() - 1);
  const size_t i = static_cast<size_t>(position);
  const double r = position - static_cast<double>(i);
  const size_t next = std::min(i + 1, sorted.size() - 1);
  return (1.0 - r) * static_cast<double>(sorted[i]) + r * static_cast<double>(sorted[next]);
}

absl::Status KldAggregator::AddWindow(double sum_logprob, double sum_ref_logprob,
                                      absl::Span<const float> logprobs, absl::Span<const float> ref_logprobs,
                                      absl::Span<const float> kld, absl::Span<const uint8_t> same_top) {
  const size_t n = logprobs.size();
  if (ref_logprobs.size() != n || kld.size() != n || same_top.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("a window has ", n, " logprobs but ", ref_logprobs.size(),
                                                   " reference logprobs, ", kld.size(), " KLDs and ",
                                                   same_top.size(), " same-top flags"));
  }
  server_sum_logprob_ += sum_logprob;
  server_sum_ref_logprob_ += sum_ref_logprob;
  for (size_t i = 0; i < n; ++i) {
    const double lp = logprobs[i];
    const double lp_ref = ref_logprobs[i];
    sum_nll_ -= lp;
    sum_nll2_ += lp * lp;
    sum_nll_ref_ -= lp_ref;
    sum_nll_ref2_ += lp_ref * lp_ref;
    sum_nll_nll_ref_ += lp * lp_ref;  // (-lp)(-lp_ref)
    const double k = kld[i];
    sum_kld_ += k;
    sum_kld2_ += k * k;
    const double dp = std::exp(lp) - std::exp(lp_ref);
    const double dp2 = dp * dp;
    sum_dp_ += dp;
    sum_dp2_ += dp2;
    sum_dp4_ += dp2 * dp2;
    const double dlp = std::fabs(lp - lp_ref);
    sum_dlp_abs_ += dlp;
    max_dlp_abs_ = std::max(max_dlp_abs_, dlp);
    if (same_top[i] != 0) ++n_same_top_;
  }
  kld_values_.insert(kld_values_.end(), kld.begin(), kld.end());
  count_ += static_cast<int64_t>(n);
  return absl::OkStatus();
}

absl::Status KldAggregator::AddKldBounds(absl::Span<const float> lower, absl::Span<const float> upper,
                                         double sum_tail_mass) {
  const size_t n = lower.size();
  if (upper.size() != n || lower_values_.size() + n != kld_values_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("KLD bounds of ", n, " and ", upper.size(),
                                                   " tokens for a window of ",
                                                   kld_values_.size() - lower_values_.size()));
  }
  bounded_ = true;
  for (size_t i = 0; i < n; ++i) {
    sum_lower_ += lower[i];
    sum_upper_ += upper[i];
  }
  sum_tail_mass_ += sum_tail_mass;
  lower_values_.insert(lower_values_.end(), lower.begin(), lower.end());
  upper_values_.insert(upper_values_.end(), upper.begin(), upper.end());
  return absl::OkStatus();
}

KldStats KldAggregator::Finish() const {
  KldStats s;
  s.count = count_;
  if (count_ == 0) return s;
  const double n = static_cast<double>(count_);
  const double e_q = MeanAndError(sum_nll_, sum_nll2_, count_).second;
  const double e_r = MeanAndError(sum_nll_ref_, sum_nll_ref2_, count_).second;
  // The means from the server's double sums (what the report's ppl uses); errors from the floats.
  const double mean_q = -server_sum_logprob_ / n;
  const double mean_r = -server_sum_ref_logprob_ / n;
  const double cov = CovarianceOfMeans(sum_nll_, sum_nll_ref_, sum_nll_nll_ref_, count_);
  s.ppl_q = std::exp(mean_q);
  s.ppl_q_error = s.ppl_q * e_q;
  s.ppl_r = std::exp(mean_r);
  s.ppl_r_error = s.ppl_r * e_r;
  s.ln_ppl_ratio = mean_q - mean_r;
  s.ln_ppl_ratio_error = std::sqrt(std::max(0.0, e_q * e_q + e_r * e_r - 2.0 * cov));
  s.ppl_ratio = std::exp(s.ln_ppl_ratio);
  s.ppl_ratio_error = s.ppl_ratio * s.ln_ppl_ratio_error;
  s.nll_correlation = e_q > 0.0 && e_r > 0.0 ? cov / (e_q * e_r) : kNaN;
  std::tie(s.kld_mean, s.kld_error) = MeanAndError(sum_kld_, sum_kld2_, count_);
  std::vector<float> sorted = kld_values_;
  std::sort(sorted.begin(), sorted.end());
  for (double f : kKldPercentiles) s.kld_percentiles.push_back(Percentile(sorted, f));
  s.same_top = static_cast<double>(n_same_top_) / n;
  s.same_top_error = count_ > 1 ? std::sqrt(s.same_top * (1.0 - s.same_top) / (n - 1.0)) : 0.0;
  std::tie(s.dp_mean, s.dp_error) = MeanAndError(sum_dp_, sum_dp2_, count_);
  const auto [mse, mse_error] = MeanAndError(sum_dp2_, sum_dp4_, count_);
  s.dp_rms = std::sqrt(mse);
  s.dp_rms_error = mse > 0.0 ? 0.5 / s.dp_rms * mse_error : 0.0;
  s.dlp_abs_mean = sum_dlp_abs_ / n;
  s.dlp_abs_max = max_dlp_abs_;
  if (bounded_) {
    s.kld_bounded = true;
    s.kld_mean_lower = sum_lower_ / n;
    s.kld_mean_upper = sum_upper_ / n;
    s.tail_mass_mean = sum_tail_mass_ / n;
    s.reference_top_k = reference_top_k_;
    for (auto [values, out] : {std::make_pair(&lower_values_, &s.kld_percentiles_lower),
                               std::make_pair(&upper_values_, &s.kld_percentiles_upper)}) {
      std::vector<float> bound = *values;
      std::sort(bound.begin(), bound.end());
      for (double f : kKldPercentiles) out->push_back(Percentile(bound, f));
    }
  }
  return s;
}

namespace {

nlohmann::json PercentileObject(const std::vector<double>& values) {
  nlohmann::json object = nlohmann::json::object();
  for (size_t i = 0; i < values.size(); ++i)
    object[PercentileKey(kKldPercentiles[i])] = NumberOrNull(values[i]);
  return object;
}

// The keys every report has.
nlohmann::json KldCoreJson(const KldStats& s) {
  return {{"count", s.count},
          {"ppl_q", NumberOrNull(s.ppl_q)},
          {"ppl_q_error", NumberOrNull(s.ppl_q_error)},
          {"ppl_r", NumberOrNull(s.ppl_r)},
          {"ppl_r_error", NumberOrNull(s.ppl_r_error)},
          {"ln_ppl_ratio", NumberOrNull(s.ln_ppl_ratio)},
          {"ln_ppl_ratio_error", NumberOrNull(s.ln_ppl_ratio_error)},
          {"ppl_ratio", NumberOrNull(s.ppl_ratio)},
          {"ppl_ratio_error", NumberOrNull(s.ppl_ratio_error)},
          {"nll_correlation", NumberOrNull(s.nll_correlation)},
          {"kld_mean", NumberOrNull(s.kld_mean)},
          {"kld_error", NumberOrNull(s.kld_error)},
          {"kld_percentiles", PercentileObject(s.kld_percentiles)},
          {"same_top", NumberOrNull(s.same_top)},
          {"same_top_error", NumberOrNull(s.same_top_error)},
          {"delta_p_mean", NumberOrNull(s.dp_mean)},
          {"delta_p_error", NumberOrNull(s.dp_error)},
          {"delta_p_rms", NumberOrNull(s.dp_rms)},
          {"delta_p_rms_error", NumberOrNull(s.dp_rms_error)},
          {"abs_delta_logprob_mean", NumberOrNull(s.dlp_abs_mean)},
          {"abs_delta_logprob_max", NumberOrNull(s.dlp_abs_max)}};
}

// The text lines every report has; the KLD lines carry their bounds when there are any.
std::string KldCoreText(const KldStats& s) {
  std::string out;
  absl::StrAppendFormat(&out, "Mean PPL(Q)                   : %10.6f +- %10.6f\n", s.ppl_q, s.ppl_q_error);
  absl::StrAppendFormat(&out, "Mean PPL(R)                   : %10.6f +- %10.6f\n", s.ppl_r, s.ppl_r_error);
  absl::StrAppendFormat(&out, "Cor(ln(PPL(Q)), ln(PPL(R)))   : %6.2f%%\n", 100.0 * s.nll_correlation);
  absl::StrAppendFormat(&out, "Mean ln(PPL(Q)/PPL(R))        : %10.6f +- %10.6f\n", s.ln_ppl_ratio,
                        s.ln_ppl_ratio_error);
  absl::StrAppendFormat(&out, "Mean PPL(Q)/PPL(R)            : %10.6f +- %10.6f\n", s.ppl_ratio,
                        s.ppl_ratio_error);
  absl::StrAppendFormat(&out, "Mean    KLD: %10.6f +- %10.6f", s.kld_mean, s.kld_error);
  if (s.kld_bounded) {
    absl::StrAppendFormat(&out, "   bounds [%10.6f, %10.6f]", s.kld_mean_lower, s.kld_mean_upper);
  }
  out += "\n";
  for (size_t i = 0; i < s.kld_percentiles.size(); ++i) {
    absl::StrAppendFormat(&out, "%-7s KLD: %10.6f", PercentileLabel(kKldPercentiles[i]),
                          s.kld_percentiles[i]);
    if (s.kld_bounded && i < s.kld_percentiles_lower.size() && i < s.kld_percentiles_upper.size()) {
      absl::StrAppendFormat(&out, "                  bounds [%10.6f, %10.6f]", s.kld_percentiles_lower[i],
                            s.kld_percentiles_upper[i]);
    }
    out += "\n";
  }
  absl::StrAppendFormat(&out, "Mean    dp : %6.3f +- %5.3f %%\n", 100.0 * s.dp_mean, 100.0 * s.dp_error);
  absl::StrAppendFormat(&out, "RMS     dp : %6.3f +- %5.3f %%\n", 100.0 * s.dp_rms, 100.0 * s.dp_rms_error);
  absl::StrAppendFormat(&out, "Same top p : %6.3f +- %5.3f %%\n", 100.0 * s.same_top,
                        100.0 * s.same_top_error);
  absl::StrAppendFormat(&out, "|dlogprob| : mean %.6f, max %.6f nats\n", s.dlp_abs_mean, s.dlp_abs_max);
  return out;
}

}  // namespace

nlohmann::json KldStatsToJson(const KldStats& s) {
  nlohmann::json j = KldCoreJson(s);
  if (s.kld_bounded) {
    j["kld_source"] = "stored";
    j["kld_mean_lower"] = NumberOrNull(s.kld_mean_lower);
    j["kld_mean_upper"] = NumberOrNull(s.kld_mean_upper);
    j["kld_percentiles_lower"] = PercentileObject(s.kld_percentiles_lower);
    j["kld_percentiles_upper"] = PercentileObject(s.kld_percentiles_upper);
    j["tail_mass_mean"] = NumberOrNull(s.tail_mass_mean);
    j["reference_top_k"] = s.reference_top_k;
    j["exact"] = {"count",
                  "ppl_q",
                  "ppl_q_error",
                  "ppl_r",
                  "ppl_r_error",
                  "ln_ppl_ratio",
                  "ln_ppl_ratio_error",
                  "ppl_ratio",
                  "ppl_ratio_error",
                  "nll_correlation",
                  "same_top",
                  "same_top_error",
                  "delta_p_mean",
                  "delta_p_error",
                  "delta_p_rms",
                  "delta_p_rms_error",
                  "abs_delta_logprob_mean",
                  "abs_delta_logprob_max"};
    j["estimated"] = {"kld_mean", "kld_error", "kld_percentiles"};
  }
  return j;
}

std::string KldStatsToText(const KldStats& s) {
  std::string out = KldCoreText(s);
  if (s.kld_bounded) {
    absl::StrAppendFormat(
        &out,
        "KLD from a stored reference: R's top-%d per position (%.4f%% of R's probability left out on "
        "average).\n"
        "  Exact: PPL(Q), PPL(R), their ratio and correlation, dp, same top p, |dlogprob|. Each KLD is the\n"
        "  log-sum estimate (Q's unstored tail taken proportional to R's) within the bounds [lower, upper]\n"
        "  the stored data give; the bounds meet when the file holds the whole vocabulary.\n",
        s.reference_top_k, 100.0 * s.tail_mass_mean);
  }
  return out;
}

}  // namespace ppl
}  // namespace scored

#include "client/ppl/report.h"

#include <cmath>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace scored {
namespace ppl {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

nlohmann::json NumberOrNull(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

}  // namespace

void Aggregator::AddWindow(double sum_logprob, absl::Span<const float> logprobs, int64_t num_bytes) {
  ++num_windows_;
  num_scored_ += static_cast<int64_t>(logprobs.size());
  sum_logprob_ += sum_logprob;
  for (float lp : logprobs) {
    const double nll = -static_cast<double>(lp);
    ++count_;
    const double delta = nll - mean_;
    mean_ += delta / static_cast<double>(count_);
    m2_ += delta * (nll - mean_);
  }
  if (num_bytes < 0) {
    bytes_known_ = false;
  } else {
    num_bytes_ += num_bytes;
  }
}

double Aggregator::Ppl() const { return num_scored_ > 0 ? std::exp(NllMean()) : kNaN; }

double Aggregator::NllMean() const {
  return num_scored_ > 0 ? -sum_logprob_ / static_cast<double>(num_scored_) : kNaN;
}

double Aggregator::NllStderr() const {
  if (count_ < 2) return 0.0;
  const double variance = m2_ / static_cast<double>(count_ - 1);
  return std::sqrt(variance / static_cast<double>(count_));
}

double Aggregator::BitsPerByte() const {
  if (!bytes_known_ || num_bytes_ <= 0) return kNaN;
  return -sum_logprob_ / std::log(2.0) / static_cast<double>(num_bytes_);
}

int64_t ScoredBytes(const Window& window) {
  if (window.byte_lengths.empty()) return -1;
  int64_t bytes = 0;
  for (size_t j = static_cast<size_t>(window.score_from); j < window.byte_lengths.size(); ++j) {
    bytes += window.byte_lengths[j];
  }
  return bytes;
}

void FillResults(const Aggregator& agg, Report* report) {
  report->ppl = agg.Ppl();
  report->nll_mean = agg.NllMean();
  report->nll_stderr = agg.NllStderr();
  report->ppl_stderr = report->ppl * report->nll_stderr;
  report->bits_per_byte = agg.BitsPerByte();
  report->sum_logprob = agg.sum_logprob();
  report->num_scored = agg.num_scored();
  report->num_windows = agg.num_windows();
  report->num_bytes = agg.bytes_known() ? agg.num_bytes() : -1;
}

nlohmann::json ReportToJson(const Report& r) {
  nlohmann::json method = {{"name", MethodName(r.method.method)}, {"ctx", r.method.ctx}};
  if (MethodHasStride(r.method.method)) method["stride"] = r.method.stride;
  method["max_windows"] = r.method.max_windows;
  // rolling / chunks tokenize without BOS and prefix every window with prefix_id; the other methods
  // tokenize "with BOS" (add_bos says whether a BOS was prepended).
  if (r.method.method == Method::kRolling || r.method.method == Method::kChunks) {
    method["prefix_id"] = r.prefix_id;
  } else {
    method["add_bos"] = r.add_bos;
    if (r.method.method == Method::kLlamaCpp) method["first_token_replaced_by_bos"] = r.add_bos;
  }

  nlohmann::json data = {{"path", r.data_path},
                         {"format", r.data_format},
                         {"num_documents", r.num_documents},
                         {"num_input_tokens", r.num_input_tokens}};
  if (!r.separator.empty()) data["separator"] = r.separator;
  if (!r.data_sha256.empty()) data["sha256"] = r.data_sha256;

  nlohmann::json j;
  j["label"] = r.label;
  j["model_path"] = r.model_path;
  j["ppl"] = NumberOrNull(r.ppl);
  j["ppl_stderr"] = NumberOrNull(r.ppl_stderr);
  j["nll_mean"] = NumberOrNull(r.nll_mean);
  j["nll_stderr"] = NumberOrNull(r.nll_stderr);
  j["bits_per_byte"] = NumberOrNull(r.bits_per_byte);
  j["sum_logprob"] = r.sum_logprob;
  j["num_scored"] = r.num_scored;
  j["num_windows"] = r.num_windows;
  j["num_bytes"] = r.num_bytes >= 0 ? nlohmann::json(r.num_bytes) : nlohmann::json();
  j["num_tokens_sent"] = r.num_tokens_sent;
  j["num_windows_resumed"] = r.num_windows_resumed;
  j["num_tokens_sent_this_run"] = r.num_tokens_sent_this_run;
  j["method"] = method;
  j["data"] = data;
  j["wall_seconds"] = r.wall_seconds;
  j["score_seconds"] = r.score_seconds;
  j["tokens_per_second"] = r.tokens_per_second;
  j["server"] = r.server;
  j["model_fingerprint"] = r.model_fingerprint;
  j["tokenizer_fingerprint"] = r.tokenizer_fingerprint;
  j["tokenizer_source"] = r.tokenizer_source;
  j["model_info"] = r.model_info;
  if (r.kld) {
    nlohmann::json kld = KldStatsToJson(r.kld_stats);
    kld["reference"] = {{"model_fingerprint", r.reference_fingerprint}, {"format", r.reference_format}};
    j["kld"] = kld;
    j["kld_mean"] = NumberOrNull(r.kld_stats.kld_mean);
    j["ppl_ratio"] = NumberOrNull(r.kld_stats.ppl_ratio);
    if (!r.reference_file.empty()) j["kld"]["reference"]["file"] = r.reference_file;
  }
  if (r.reference_file_saved) {
    j["saved_reference"] = {
        {"file", r.reference_file}, {"top_k", r.reference_top_k}, {"bytes", r.reference_file_bytes}};
  }
  return j;
}

std::string ReportToText(const Report& r) {
  std::string method = absl::StrCat(MethodName(r.method.method), " ctx=", r.method.ctx);
  if (MethodHasStride(r.method.method)) absl::StrAppend(&method, " stride=", r.method.stride);
  if (r.method.max_windows > 0) absl::StrAppend(&method, " max_windows=", r.method.max_windows);
  std::string out;
  absl::StrAppendFormat(&out, "label          %s\n", r.label);
  absl::StrAppendFormat(&out, "model_path     %s\n",
                        r.model_path.empty() ? "(not given by the server)" : r.model_path);
  absl::StrAppendFormat(&out, "method         %s\n", method);
  absl::StrAppendFormat(&out, "data           %s (%s, %d document(s), %d tokens)\n", r.data_path,
                        r.data_format, r.num_documents, r.num_input_tokens);
  absl::StrAppendFormat(&out, "ppl            %.6f +- %.6f\n", r.ppl, r.ppl_stderr);
  absl::StrAppendFormat(&out, "nll_mean       %.6f +- %.6f\n", r.nll_mean, r.nll_stderr);
  if (std::isfinite(r.bits_per_byte)) {
    absl::StrAppendFormat(&out, "bits_per_byte  %.6f\n", r.bits_per_byte);
  }
  absl::StrAppendFormat(&out, "num_scored     %d in %d windows\n", r.num_scored, r.num_windows);
  if (r.num_windows_resumed > 0) {
    absl::StrAppendFormat(&out, "resumed        %d of %d windows from the journal\n", r.num_windows_resumed,
                          r.num_windows);
  }
  absl::StrAppendFormat(&out, "wall_seconds   %.3f (%.0f tokens/s scoring)\n", r.wall_seconds,
                        r.tokens_per_second);
  absl::StrAppendFormat(&out, "model          %s\n", r.model_fingerprint);
  absl::StrAppendFormat(&out, "tokenizer      %s (%s)\n", r.tokenizer_fingerprint, r.tokenizer_source);
  if (r.reference_file_saved) {
    absl::StrAppendFormat(&out, "saved          %s: R's top-%d per position, %d bytes\n", r.reference_file,
                          r.reference_top_k, r.reference_file_bytes);
  }
  if (r.kld) {
    absl::StrAppendFormat(&out, "reference      %s (%s)%s\n", r.reference_fingerprint, r.reference_format,
                          r.reference_file.empty() ? "" : absl::StrCat(", stored in ", r.reference_file));
    absl::StrAppendFormat(&out, "====== Q = model, R = reference: %d scored tokens ======\n",
                          r.kld_stats.count);
    out += KldStatsToText(r.kld_stats);
  }
  return out;
}

absl::Status WriteJsonReport(const Report& report, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InternalError(absl::StrCat("cannot write report ", path));
  out << ReportToJson(report).dump(2) << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("error writing report ", path));
  return absl::OkStatus();
}

}  // namespace ppl
}  // namespace scored

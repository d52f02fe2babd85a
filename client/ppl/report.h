// Aggregation of scored windows into a perplexity report (DESIGN.md §5) and its JSON / text forms.
//
//   ppl           = exp(-sum_logprob / num_scored)      (sum_logprob = sum of the windows' double sums)
//   ppl_stderr    = ppl * nll_stderr: the first-order (delta-method) error of exp(nll_mean), since
//                   d exp(m) / dm = exp(m); the same convention as llama-perplexity's "PPL = X +/- Y"
//   nll_mean      = -sum_logprob / num_scored
//   nll_stderr    = sample standard deviation (n - 1 denominator, as lm-eval's mean_stderr) of the
//                   per-token NLLs / sqrt(num_scored); 0 when num_scored < 2
//   bits_per_byte = -sum_logprob / ln 2 / num_bytes, num_bytes = UTF-8 bytes of every scored token,
//                   counted each time the token is scored; absent (NaN in Report, null in JSON) when
//                   no byte lengths were known or num_bytes == 0
//
// Thread-safety: Aggregator is not thread-safe (one owner adds windows); Report is a plain value.
#ifndef SCORED_CLIENT_PPL_REPORT_H_
#define SCORED_CLIENT_PPL_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/ppl/kld.h"
#include "client/ppl/windows.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace ppl {

// Per-token NLL statistics of scored windows. Welford's update in double keeps the variance exact
// enough for ~1e6 tokens of NLLs around 1-10 nats.
class Aggregator {
 public:
  // Adds one scored window: its server-side double sum, its per-token logprobs (natural log; size =
  // number of scored positions) and the UTF-8 bytes of its scored tokens (< 0: unknown).
  void AddWindow(double sum_logprob, absl::Span<const float> logprobs, int64_t num_bytes);

  int64_t num_windows() const { return num_windows_; }
  int64_t num_scored() const { return num_scored_; }
  double sum_logprob() const { return sum_logprob_; }
  bool bytes_known() const { return bytes_known_; }
  int64_t num_bytes() const { return num_bytes_; }

  double Ppl() const;          // NaN if nothing scored
  double NllMean() const;      // NaN if nothing scored
  double NllStderr() const;    // 0 if fewer than 2 tokens
  double BitsPerByte() const;  // NaN if bytes unknown or 0

 private:
  int64_t num_windows_ = 0;
  int64_t num_scored_ = 0;
  double sum_logprob_ = 0.0;
  // Welford over per-token NLLs.
  int64_t count_ = 0;
  double mean_ = 0.0;
  double m2_ = 0.0;
  bool bytes_known_ = true;
  int64_t num_bytes_ = 0;
};

// UTF-8 bytes of a window's scored tokens (positions score_from..n-1); -1 if it has no byte lengths.
int64_t ScoredBytes(const Window& window);

struct Report {
  // Results.
  double ppl = 0.0;
  double nll_mean = 0.0;
  double nll_stderr = 0.0;
  double ppl_stderr = 0.0;     // ppl * nll_stderr (above)
  double bits_per_byte = 0.0;  // NaN = unknown
  double sum_logprob = 0.0;
  int64_t num_scored = 0;
  int64_t num_windows = 0;
  int64_t num_bytes = -1;       // -1 = unknown
  int64_t num_tokens_sent = 0;  // sum of window lengths (tokens the server processed)
  // Resumed from a journal: windows taken from it, and the tokens of the windows this run sent (both
  // windows and tokens of a run without a journal: 0 and num_tokens_sent).
  int64_t num_windows_resumed = 0;
  int64_t num_tokens_sent_this_run = 0;
  // Method and data.
  MethodParams method;
  int32_t prefix_id = -1;  // rolling / chunks window prefix (BOS, or EOS without one); -1 if unused
  bool add_bos = false;    // "tokenize with BOS" prepended BOS
  std::string data_path;
  std::string data_sha256;  // hex SHA-256 of the data file's bytes (what `compare` checks); "" = unknown
  std::string data_format;
  std::string separator;  // text format only
  int64_t num_documents = 0;
  int64_t num_input_tokens = 0;  // tokens of the tokenized text(s) before windowing
  // Timing: wall_seconds covers the whole run (connect, tokenize, score); tokens_per_second =
  // num_tokens_sent_this_run / score_seconds (the scoring phase only; 0 when the journal held every window).
  double wall_seconds = 0.0;
  double score_seconds = 0.0;
  double tokens_per_second = 0.0;
  // Provenance. label: --label, else the last component of model_path (the folder the server loaded,
  // from its ModelInfo), else the first 12 hex digits of the model fingerprint (a server too old to say).
  std::string label;
  std::string model_path;
  std::string server;
  std::string model_fingerprint;
  std::string tokenizer_fingerprint;
  std::string tokenizer_source;  // "server" or the --tokenizer directory
  nlohmann::json model_info;     // the server's ModelInfo fields
  // --kld (kld.h): the comparison with the server's reference model, and which model that is.
  bool kld = false;
  KldStats kld_stats;
  std::string reference_fingerprint;
  std::string reference_format;
  // --save_reference (reference_file_saved) or --kld --reference_file: the file, its K and (saved) its bytes.
  std::string reference_file;
  bool reference_file_saved = false;
  int32_t reference_top_k = 0;
  int64_t reference_file_bytes = 0;
};

// Fills the result fields of `report` from the aggregator.
void FillResults(const Aggregator& agg, Report* report);

// The report as JSON (stable keys; NaN values become null; every number, int64 included, is a JSON number). A
// --kld report adds "kld" (KldStatsToJson) with "reference": {"model_fingerprint", "format"} inside it, and
// top-level "kld_mean" and "ppl_ratio" (PPL(Q)/PPL(R)) for charts; with --reference_file, "file" in
// "reference". A --save_reference report adds "saved_reference": {"file", "top_k", "bytes"}.
nlohmann::json ReportToJson(const Report& report);
// A short human-readable summary (several lines, ending in "\n").
std::string ReportToText(const Report& report);
// Writes ReportToJson (indented) to `path`. INTERNAL naming the path on failure.
absl::Status WriteJsonReport(const Report& report, const std::string& path);

}  // namespace ppl
}  // namespace scored

#endif  // SCORED_CLIENT_PPL_REPORT_H_

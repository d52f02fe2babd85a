// `scored-ppl compare REPORT...`: a table across scored-ppl JSON reports (--json), one row per report in the
// order given, as markdown (stdout) and CSV (--csv OUT).
//
// Columns: label, PPL +- its error (report.h: ppl_stderr = ppl * nll_stderr), the ratio of the PPL to the
// first report's, bits per weight of the decoder's linear layers (the server's ModelInfo), and when any
// report is a --kld run: mean KLD +- error, PPL(Q)/PPL(R) +- error and same top p (kld.h; empty cells for
// reports without them).
//
// Reports are comparable when they were made the same way on the same data: the same method object
// ("method": name, ctx, stride, max_windows, prefix_id or add_bos), the same windows ("num_windows",
// "num_scored"), the same data ("data.sha256" when both reports carry it, else "data.path"; and
// "data.format", "data.separator") and the same tokenizer ("tokenizer_fingerprint"). Otherwise the
// comparison is refused (FAILED_PRECONDITION naming the first differing field and both reports) unless
// forced, when every row that differs from the first says in which fields ("differs" column).
//
// Older reports stay readable: a missing label becomes the model folder's name or the file's name, a
// missing ppl_stderr is computed from nll_stderr, and 64-bit integers written as strings are parsed.
//
// Thread-safety: plain functions of their arguments.
#ifndef SCORED_CLIENT_PPL_COMPARE_H_
#define SCORED_CLIENT_PPL_COMPARE_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace ppl {

// One report's row and the fields that decide comparability. Doubles are NaN when the report lacks them.
struct CompareEntry {
  std::string source;  // where it was read from (a file path)
  std::string label;
  double ppl = 0.0;
  double ppl_stderr = 0.0;
  double bits_per_weight = 0.0;
  bool kld = false;
  double kld_mean = 0.0, kld_error = 0.0;
  double ppl_ratio_ref = 0.0, ppl_ratio_ref_error = 0.0;  // PPL(Q)/PPL(R) of a --kld run
  double same_top = 0.0;
  // Comparability, as (field name, value as compact JSON text) in a fixed order.
  std::vector<std::pair<std::string, std::string>> identity;
};

// The row of a parsed report. INVALID_ARGUMENT naming `source` when it is not a scored-ppl report (no
// numeric "ppl", no "method" object).
absl::StatusOr<CompareEntry> EntryFromReport(const nlohmann::json& report, const std::string& source);
// Reads and parses the JSON file at `path` (NOT_FOUND / INVALID_ARGUMENT naming it).
absl::StatusOr<CompareEntry> LoadReportEntry(const std::string& path);

// The fields of `other`'s identity that differ from `first`'s ("method.ctx", "data.sha256", ...).
std::vector<std::string> DifferingFields(const CompareEntry& first, const CompareEntry& other);

struct Comparison {
  std::vector<CompareEntry> entries;
  std::vector<std::vector<std::string>> differing;  // per entry, DifferingFields against entries[0]
  bool kld = false;                                 // some entry is a --kld report
  bool any_differing = false;
};

// Checks comparability. INVALID_ARGUMENT for no entries; FAILED_PRECONDITION when some entry differs
// from the first and !force: "<field> differs: <first source> has <v1>, <other source> has <v2> (...)".
absl::StatusOr<Comparison> Compare(std::vector<CompareEntry> entries, bool force);

// The markdown table (a header, an alignment row and one row per entry; "\n"-terminated lines).
std::string MarkdownTable(const Comparison& comparison);
// The CSV (RFC 4180: a header row, numbers at full precision, empty cells for absent values).
std::string CsvTable(const Comparison& comparison);

// The whole subcommand: `args` are what follows "compare" ([--csv OUT] [--force] REPORT...). Prints the
// table to `out`, errors to `err`; returns the exit status: 0 done, 1 an unreadable report, refused
// comparison or unwritable CSV, 2 a bad command line.
int CompareCommand(const std::vector<std::string>& args, std::FILE* out, std::FILE* err);

}  // namespace ppl
}  // namespace scored

#endif  // SCORED_CLIENT_PPL_COMPARE_H_

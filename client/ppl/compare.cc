#include "client/ppl/compare.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace scored {
namespace ppl {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A number of the report: a JSON number, or a string holding one (64-bit integers of older reports).
double Number(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return kNaN;
  auto it = j.find(key);
  if (it == j.end()) return kNaN;
  if (it->is_number()) return it->get<double>();
  double v = 0.0;
  if (it->is_string() && absl::SimpleAtod(it->get<std::string>(), &v)) return v;
  return kNaN;
}

// A field's value as compact JSON text; a string holding an integer compares equal to that integer.
std::string Canonical(const nlohmann::json& j) {
  int64_t v = 0;
  if (j.is_string() && absl::SimpleAtoi(j.get<std::string>(), &v)) return absl::StrCat(v);
  return j.dump();
}

std::string BaseName(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string Fixed(double v, int digits) { return std::isfinite(v) ? absl::StrFormat("%.*f", digits, v) : ""; }
std::string Full(double v) { return std::isfinite(v) ? absl::StrFormat("%.17g", v) : ""; }
std::string PlusMinus(double v, double e, int digits) {
  if (!std::isfinite(v)) return "";
  return std::isfinite(e) ? absl::StrCat(Fixed(v, digits), " ± ", Fixed(e, digits)) : Fixed(v, digits);
}

std::string CsvCell(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// A markdown cell: pipes escaped, newlines flattened.
std::string MdCell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

double Ratio(const Comparison& c, const CompareEntry& e) {
  const double first = c.entries.front().ppl;
  return std::isfinite(first) && first > 0 ? e.ppl / first : kNaN;
}

}  // namespace

absl::StatusOr<CompareEntry> EntryFromReport(const nlohmann::json& report, const std::string& source) {
  if (!report.is_object() || !report.contains("method") || !report["method"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a scored-ppl JSON report (no \"method\")"));
  }
  CompareEntry e;
  e.source = source;
  e.ppl = Number(report, "ppl");
  if (!std::isfinite(e.ppl)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a scored-ppl JSON report (no numeric \"ppl\")"));
  }
  e.ppl_stderr = Number(report, "ppl_stderr");
  if (!std::isfinite(e.ppl_stderr)) e.ppl_stderr = e.ppl * Number(report, "nll_stderr");
  const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json& info = report.contains("model_info") ? report["model_info"] : empty;
  e.bits_per_weight = Number(info, "bits_per_weight_decoder");
  if (report.contains("label") && report["label"].is_string() &&
      !report["label"].get<std::string>().empty()) {
    e.label = report["label"].get<std::string>();
  } else if (info.is_object() && info.contains("model_path") && info["model_path"].is_string() &&
             !info["model_path"].get<std::string>().empty()) {
    e.label = BaseName(info["model_path"].get<std::string>());
  } else {
    e.label = BaseName(source);
  }
  if (report.contains("kld") && report["kld"].is_object()) {
    const nlohmann::json& k = report["kld"];
    e.kld = true;
    e.kld_mean = Number(k, "kld_mean");
    e.kld_error = Number(k, "kld_error");
    e.ppl_ratio_ref = Number(k, "ppl_ratio");
    e.ppl_ratio_ref_error = Number(k, "ppl_ratio_error");
    e.same_top = Number(k, "same_top");
  }

  const nlohmann::json& method = report["method"];
  for (auto it = method.begin(); it != method.end(); ++it) {
    e.identity.emplace_back(absl::StrCat("method.", it.key()), Canonical(it.value()));
  }
  for (const char* key : {"num_windows", "num_scored"}) {
    e.identity.emplace_back(key, report.contains(key) ? Canonical(report[key]) : "null");
  }
  const nlohmann::json& data = report.contains("data") && report["data"].is_object() ? report["data"] : empty;
  // The file's bytes when both reports hashed them, else its path (DifferingFields picks).
  for (const char* key : {"sha256", "path", "format", "separator"}) {
    e.identity.emplace_back(absl::StrCat("data.", key), data.contains(key) ? Canonical(data[key]) : "null");
  }
  e.identity.emplace_back("tokenizer_fingerprint", report.contains("tokenizer_fingerprint")
                                                       ? Canonical(report["tokenizer_fingerprint"])
                                                       : "null");
  return e;
}

absl::StatusOr<CompareEntry> LoadReportEntry(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read report ", path));
  std::ostringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  return EntryFromReport(j, path);
}

std::vector<std::string> DifferingFields(const CompareEntry& first, const CompareEntry& other) {
  auto value = [](const CompareEntry& e, const std::string& name) -> std::string {
    for (const auto& [field, v] : e.identity) {
      if (field == name) return v;
    }
    return "null";
  };
  // The data file's path matters only when a report lacks its hash (a copy elsewhere is the same data).
  const bool both_hashed = value(first, "data.sha256") != "null" && value(other, "data.sha256") != "null";
  std::vector<std::string> names;
  for (const auto& [field, v] : first.identity) names.push_back(field);
  for (const auto& [field, v] : other.identity) {
    if (std::find(names.begin(), names.end(), field) == names.end()) names.push_back(field);
  }
  std::vector<std::string> differing;
  for (const std::string& name : names) {
    if (name == "data.path" && both_hashed) continue;
    if (name == "data.sha256" && !both_hashed) continue;
    if (value(first, name) != value(other, name)) differing.push_back(name);
  }
  return differing;
}

absl::StatusOr<Comparison> Compare(std::vector<CompareEntry> entries, bool force) {
  if (entries.empty()) return absl::InvalidArgumentError("no reports to compare");
  Comparison c;
  c.entries = std::move(entries);
  for (const CompareEntry& e : c.entries) {
    c.differing.push_back(DifferingFields(c.entries.front(), e));
    c.kld = c.kld || e.kld;
    if (c.differing.back().empty()) continue;
    c.any_differing = true;
    if (force) continue;
    const std::string& field = c.differing.back().front();
    auto value = [&field](const CompareEntry& x) {
      for (const auto& [name, v] : x.identity) {
        if (name == field) return v;
      }
      return std::string("null");
    };
    return absl::FailedPreconditionError(absl::StrCat(
        field, " differs: ", c.entries.front().source, " has ", value(c.entries.front()), ", ", e.source,
        " has ", value(e), " (differing fields: ", absl::StrJoin(c.differing.back(), ", "),
        "; --force compares them anyway and flags them)"));
  }
  return c;
}

std::string MarkdownTable(const Comparison& c) {
  std::vector<std::string> header = {"label", "PPL ± err", "ratio", "bits/weight"};
  std::vector<std::string> align = {":--", "--:", "--:", "--:"};
  if (c.kld) {
    header.insert(header.end(), {"KLD ± err", "PPL(Q)/PPL(R) ± err", "same top p"});
    align.insert(align.end(), {"--:", "--:", "--:"});
  }
  if (c.any_differing) {
    header.push_back("differs from the first in");
    align.push_back(":--");
  }
  std::string out =
      absl::StrCat("| ", absl::StrJoin(header, " | "), " |\n| ", absl::StrJoin(align, " | "), " |\n");
  for (size_t i = 0; i < c.entries.size(); ++i) {
    const CompareEntry& e = c.entries[i];
    std::vector<std::string> row = {MdCell(e.label), PlusMinus(e.ppl, e.ppl_stderr, 4), Fixed(Ratio(c, e), 4),
                                    Fixed(e.bits_per_weight, 3)};
    if (c.kld) {
      row.push_back(e.kld ? PlusMinus(e.kld_mean, e.kld_error, 6) : "");
      row.push_back(e.kld ? PlusMinus(e.ppl_ratio_ref, e.ppl_ratio_ref_error, 4) : "");
      row.push_back(e.kld && std::isfinite(e.same_top) ? absl::StrFormat("%.3f %%", 100.0 * e.same_top) : "");
    }
    if (c.any_differing) row.push_back(MdCell(absl::StrJoin(c.differing[i], ", ")));
    absl::StrAppend(&out, "| ", absl::StrJoin(row, " | "), " |\n");
  }
  return out;
}

std::string CsvTable(const Comparison& c) {
  std::vector<std::string> header = {"label", "report", "ppl", "ppl_stderr", "ratio", "bits_per_weight"};
  if (c.kld) {
    header.insert(header.end(),
                  {"kld_mean", "kld_error", "ppl_ratio_ref", "ppl_ratio_ref_error", "same_top"});
  }
  if (c.any_differing) header.push_back("differs");
  std::string out = absl::StrCat(absl::StrJoin(header, ","), "\r\n");
  for (size_t i = 0; i < c.entries.size(); ++i) {
    const CompareEntry& e = c.entries[i];
    std::vector<std::string> row = {CsvCell(e.label),   CsvCell(e.source), Full(e.ppl),
                                    Full(e.ppl_stderr), Full(Ratio(c, e)), Full(e.bits_per_weight)};
    if (c.kld) {
      for (double v : {e.kld_mean, e.kld_error, e.ppl_ratio_ref, e.ppl_ratio_ref_error, e.same_top}) {
        row.push_back(e.kld ? Full(v) : "");
      }
    }
    if (c.any_differing) row.push_back(CsvCell(absl::StrJoin(c.differing[i], " ")));
    absl::StrAppend(&out, absl::StrJoin(row, ","), "\r\n");
  }
  return out;
}

int CompareCommand(const std::vector<std::string>& args, std::FILE* out, std::FILE* err) {
  std::string csv_path;
  bool force = false;
  std::vector<std::string> paths;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(
          "scored-ppl compare [--csv OUT] [--force] REPORT.json...\n"
          "  A markdown table (stdout) and CSV (--csv) of scored-ppl --json reports: label, PPL +- error,\n"
          "  ratio to the first report, bits per weight, KLD columns for --kld reports. Reports made with\n"
          "  another method, other windows, data or tokenizer are refused (exit 1, naming the field) unless\n"
          "  --force, which compares them and flags the differing fields.\n",
          out);
      return 0;
    }
    if (a == "--force") {
      force = true;
    } else if (a == "--csv" || absl::StartsWith(a, "--csv=")) {
      if (a == "--csv") {
        if (i + 1 >= args.size()) {
          std::fputs("scored-ppl compare: --csv needs a value (see --help)\n", err);
          return 2;
        }
        csv_path = args[++i];
      } else {
        csv_path = a.substr(6);
      }
    } else if (absl::StartsWith(a, "-")) {
      std::fprintf(err, "scored-ppl compare: unknown flag %s (see --help)\n", a.c_str());
      return 2;
    } else {
      paths.push_back(a);
    }
  }
  if (paths.empty()) {
    std::fputs("scored-ppl compare: give one or more REPORT.json files (see --help)\n", err);
    return 2;
  }
  std::vector<CompareEntry> entries;
  for (const std::string& path : paths) {
    absl::StatusOr<CompareEntry> entry = LoadReportEntry(path);
    if (!entry.ok()) {
      std::fprintf(err, "scored-ppl compare: %s\n", std::string(entry.status().message()).c_str());
      return 1;
    }
    entries.push_back(*std::move(entry));
  }
  absl::StatusOr<Comparison> comparison = Compare(std::move(entries), force);
  if (!comparison.ok()) {
    std::fprintf(err, "scored-ppl compare: %s\n", std::string(comparison.status().message()).c_str());
    return 1;
  }
  if (!csv_path.empty()) {
    std::ofstream csv(csv_path, std::ios::binary | std::ios::trunc);
    csv << CsvTable(*comparison);
    csv.close();
    if (!csv) {
      std::fprintf(err, "scored-ppl compare: cannot write %s\n", csv_path.c_str());
      return 1;
    }
  }
  std::fputs(MarkdownTable(*comparison).c_str(), out);
  return 0;
}

}  // namespace ppl
}  // namespace scored

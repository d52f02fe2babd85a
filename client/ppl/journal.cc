#include "client/ppl/journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/sha256.h"
#include "engine/base/status_macros.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace ppl {

bool WriteFully(int fd, std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

namespace {

constexpr char kMagic[] = "scored-ppl/2";
constexpr char kChecksumField[] = ",\"c\":\"";

absl::Status IoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat("journal ", path, ": ", what, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, const std::string& data, const std::string& path) {
  return WriteFully(fd, data) ? absl::OkStatus() : IoError("write", path);
}

absl::StatusOr<std::string> ReadAll(int fd, const std::string& path) {
  std::string out;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("read", path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string HeaderLine(const JournalIdentity& identity) {
  nlohmann::ordered_json header;
  header["journal"] = kMagic;
  for (const auto& [name, value] : identity.fields) header[name] = value;
  return header.dump();
}

// Finite values are JSON numbers; -inf / inf / nan are written as strings.
bool IsNumberOrSpecial(const nlohmann::json& v) {
  if (v.is_number()) return true;
  if (!v.is_string()) return false;
  const std::string& s = v.get_ref<const std::string&>();
  return s == "-inf" || s == "inf" || s == "nan" || s == "-nan";
}

double NumberOrSpecial(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  const std::string& s = v.get_ref<const std::string&>();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  if (s == "inf") return std::numeric_limits<double>::infinity();
  return std::numeric_limits<double>::quiet_NaN();
}

// A double as "%.17g" (exact round trip), or a quoted "-inf" / "inf" / "nan" (not JSON numbers).
std::string FormatDouble(double v) {
  return std::isfinite(v) ? absl::StrFormat("%.17g", v) : absl::StrFormat("\"%g\"", v);
}

// A JSON array of floats, each "%.9g" (the exact round trip of a float) or a quoted non-finite value.
void AppendFloats(const std::vector<float>& values, std::string* line) {
  line->push_back('[');
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) line->push_back(',');
    const double v = static_cast<double>(values[i]);
    if (std::isfinite(v)) {
      absl::StrAppendFormat(line, "%.9g", v);
    } else {
      absl::StrAppendFormat(line, "\"%g\"", v);
    }
  }
  line->push_back(']');
}

// Reads an array of exactly `n` floats written by AppendFloats.
absl::Status ParseFloats(const nlohmann::json& array, int64_t n, std::vector<float>* out) {
  if (!array.is_array()) return absl::InvalidArgumentError("field of the wrong type");
  if (n != static_cast<int64_t>(array.size())) return absl::InvalidArgumentError("inconsistent record");
  out->reserve(static_cast<size_t>(n));
  for (const auto& v : array) {
    if (!IsNumberOrSpecial(v)) return absl::InvalidArgumentError("non-numeric value");
    // %.9g text -> nearest double -> float is the float that was written (9 significant digits are
    // far inside half a float ulp, so the double rounding cannot cross a float midpoint).
    out->push_back(static_cast<float>(NumberOrSpecial(v)));
  }
  return absl::OkStatus();
}

// `sum` against the sum of `values` (the server sums in double what it rounds to these floats).
absl::Status CheckSum(double sum, const std::vector<float>& values, const char* field) {
  double total = 0.0, magnitude = 0.0;
  for (const float v : values) {
    total += v;
    magnitude += std::fabs(static_cast<double>(v));
  }
  if (std::isnan(sum) != std::isnan(total) || std::fabs(sum - total) > 1e-6 * magnitude + 1e-9) {
    return absl::InvalidArgumentError(absl::StrCat("its sum \"", field, "\" ", FormatDouble(sum),
                                                   " is not the sum of its values, ", FormatDouble(total)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string FormatRecordLine(const JournalRecord& r) {
  std::string line =
      absl::StrFormat("{\"w\":%d,\"s\":%s,\"n\":%d,\"b\":%d,\"lp\":", r.window, FormatDouble(r.sum_logprob),
                      static_cast<int64_t>(r.logprobs.size()), r.num_bytes);
  AppendFloats(r.logprobs, &line);
  if (r.has_reference) {
    absl::StrAppend(&line, ",\"rs\":", FormatDouble(r.sum_ref_logprob), ",\"rl\":");
    AppendFloats(r.ref_logprobs, &line);
    line += ",\"k\":";
    AppendFloats(r.kld, &line);
    line += ",\"t\":\"";
    for (uint8_t t : r.same_top) line.push_back(t != 0 ? '1' : '0');
    line += "\"";
  }
  absl::StrAppend(&line, kChecksumField, Sha256Hex(line).substr(0, 16), "\"}");
  return line;
}

absl::StatusOr<JournalRecord> ParseRecordLine(const std::string& line) {
  const size_t c = line.rfind(kChecksumField);
  if (c == std::string::npos || line.size() != c + std::strlen(kChecksumField) + 16 + 2 ||
      line.compare(c + std::strlen(kChecksumField), 16,
                   Sha256Hex(std::string_view(line).substr(0, c)).substr(0, 16)) != 0) {
    return absl::InvalidArgumentError("its checksum does not match its content");
  }
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("not a JSON object");
  for (const char* key : {"w", "s", "n", "b", "lp"}) {
    if (!j.contains(key)) return absl::InvalidArgumentError(absl::StrCat("missing field ", key));
  }
  if (!j["w"].is_number_integer() || !IsNumberOrSpecial(j["s"]) || !j["n"].is_number_integer() ||
      !j["b"].is_number_integer() || !j["lp"].is_array()) {
    return absl::InvalidArgumentError("field of the wrong type");
  }
  JournalRecord r;
  r.window = j["w"].get<int64_t>();
  r.sum_logprob = NumberOrSpecial(j["s"]);
  r.num_bytes = j["b"].get<int64_t>();
  const int64_t n = j["n"].get<int64_t>();
  if (r.window < 0) return absl::InvalidArgumentError("inconsistent record");
  SCORED_RETURN_IF_ERROR(ParseFloats(j["lp"], n, &r.logprobs));
  if (j.contains("rs") || j.contains("rl") || j.contains("k") || j.contains("t")) {
    for (const char* key : {"rs", "rl", "k", "t"}) {
      if (!j.contains(key)) return absl::InvalidArgumentError(absl::StrCat("missing field ", key));
    }
    if (!IsNumberOrSpecial(j["rs"]) || !j["t"].is_string()) {
      return absl::InvalidArgumentError("field of the wrong type");
    }
    r.has_reference = true;
    r.sum_ref_logprob = NumberOrSpecial(j["rs"]);
    SCORED_RETURN_IF_ERROR(ParseFloats(j["rl"], n, &r.ref_logprobs));
    SCORED_RETURN_IF_ERROR(ParseFloats(j["k"], n, &r.kld));
    const std::string& flags = j["t"].get_ref<const std::string&>();
    if (static_cast<int64_t>(flags.size()) != n) return absl::InvalidArgumentError("inconsistent record");
    r.same_top.reserve(flags.size());
    for (char c : flags) {
      if (c != '0' && c != '1') return absl::InvalidArgumentError("same-top flag not 0 or 1");
      r.same_top.push_back(c == '1' ? 1 : 0);
    }
  }
  SCORED_RETURN_IF_ERROR(CheckSum(r.sum_logprob, r.logprobs, "s"));
  if (r.has_reference) SCORED_RETURN_IF_ERROR(CheckSum(r.sum_ref_logprob, r.ref_logprobs, "rs"));
  return r;
}

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(const std::string& path,
                                                       const JournalIdentity& identity, int sync_every,
                                                       bool strict, std::FILE* note_out) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--journal ", path, " is not a regular file (a directory, device, FIFO or socket)"));
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("open", path);
  std::unique_ptr<Journal> journal(new Journal(path, fd, sync_every < 1 ? 1 : sync_every));
  absl::StatusOr<std::string> content = ReadAll(fd, path);
  if (!content.ok()) return content.status();
  const std::string header = HeaderLine(identity);

  if (content->empty() || content->find('\n') == std::string::npos) {
    // New journal (or one torn inside its header: nothing was recorded yet).
    if (::ftruncate(fd, 0) != 0) return IoError("truncate", path);
    if (::lseek(fd, 0, SEEK_SET) < 0) return IoError("seek", path);
    if (absl::Status s = WriteAll(fd, header + "\n", path); !s.ok()) return s;
    if (::fdatasync(fd) != 0) return IoError("fdatasync", path);
    return journal;
  }

  const size_t header_end = content->find('\n');
  const nlohmann::json found = nlohmann::json::parse(content->substr(0, header_end), nullptr, false);
  if (!found.is_discarded() && found.is_object() && found.contains("journal") && found["journal"] != kMagic &&
      found["journal"].is_string()) {
    return absl::FailedPreconditionError(
        absl::StrCat("journal ", path, " is of format ", found["journal"].get<std::string>(),
                     ", this scored-ppl writes ", kMagic,
                     " (records with checksums): delete it to start over, or finish that run with the "
                     "scored-ppl that wrote it"));
  }
  if (found.is_discarded() || !found.is_object() || !found.contains("journal") ||
      found["journal"] != kMagic) {
    return absl::FailedPreconditionError(absl::StrCat(
        "journal ", path, " does not start with a scored-ppl journal header; use another --journal file"));
  }
  for (const auto& [name, value] : identity.fields) {
    const std::string have =
        found.contains(name) && found[name].is_string() ? found[name].get<std::string>() : "<absent>";
    if (have != value) {
      return absl::FailedPreconditionError(absl::StrCat(
          "journal ", path, " belongs to another run: field '", name, "' is '", have, "' there but '", value,
          "' now (use another --journal file, or delete this one to start over)"));
    }
  }

  size_t pos = header_end + 1;
  size_t good_end = pos;
  while (pos < content->size()) {
    const size_t nl = content->find('\n', pos);
    if (nl == std::string::npos) break;  // torn last line
    const std::string line = content->substr(pos, nl - pos);
    absl::StatusOr<JournalRecord> record = ParseRecordLine(line);
    if (!record.ok()) {
      if (nl + 1 >= content->size()) break;  // unparseable last line: torn
      // Which window, when the line still names one: a complete line that fails its checks was edited.
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      const std::string which =
          !j.is_discarded() && j.is_object() && j.contains("w") && j["w"].is_number_integer()
              ? absl::StrCat("record of window ", j["w"].get<int64_t>())
              : "record";
      const std::string what = absl::StrCat("journal ", path, ": ", which, " at byte ", pos, " is refused (",
                                            record.status().message(), ")");
      if (strict) {
        return absl::DataLossError(absl::StrCat(what, "; --journal_strict: delete the file to start over"));
      }
      if (note_out != nullptr)
        std::fprintf(note_out, "scored-ppl: %s; its window is scored again\n", what.c_str());
      pos = nl + 1;
      good_end = pos;
      continue;
    }
    journal->resumed_.emplace(record->window, std::move(*record));
    pos = nl + 1;
    good_end = pos;
  }
  if (good_end < content->size()) {
    if (::ftruncate(fd, static_cast<off_t>(good_end)) != 0) return IoError("truncate", path);
  }
  if (::lseek(fd, static_cast<off_t>(good_end), SEEK_SET) < 0) return IoError("seek", path);
  return journal;
}

Journal::~Journal() { Close().IgnoreError(); }

absl::Status Journal::Append(const JournalRecord& record) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("journal ", path_, " is closed"));
  if (absl::Status s = WriteAll(fd_, FormatRecordLine(record) + "\n", path_); !s.ok()) return s;
  if (++unsynced_ >= sync_every_) {
    if (::fdatasync(fd_) != 0) return IoError("fdatasync", path_);
    unsynced_ = 0;
  }
  return absl::OkStatus();
}

absl::Status Journal::Close() {
  if (fd_ < 0) return absl::OkStatus();
  const int fd = fd_;
  fd_ = -1;
  if (unsynced_ > 0 && ::fdatasync(fd) != 0) {
    ::close(fd);
    return IoError("fdatasync", path_);
  }
  if (::close(fd) != 0) return IoError("close", path_);
  return absl::OkStatus();
}

}  // namespace ppl
}  // namespace scored

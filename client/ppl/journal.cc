#include "client/ppl/journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace ppl {
namespace {

constexpr char kMagic[] = "scored-ppl/1";

absl::Status IoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat("journal ", path, ": ", what, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("write", path);
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
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

}  // namespace

std::string FormatRecordLine(const JournalRecord& r) {
  const std::string sum = std::isfinite(r.sum_logprob) ? absl::StrFormat("%.17g", r.sum_logprob)
                                                       : absl::StrFormat("\"%g\"", r.sum_logprob);
  std::string line = absl::StrFormat("{\"w\":%d,\"s\":%s,\"n\":%d,\"b\":%d,\"lp\":[", r.window, sum,
                                     static_cast<int64_t>(r.logprobs.size()), r.num_bytes);
  for (size_t i = 0; i < r.logprobs.size(); ++i) {
    if (i > 0) line.push_back(',');
    const double lp = static_cast<double>(r.logprobs[i]);
    if (std::isfinite(lp)) {
      absl::StrAppendFormat(&line, "%.9g", lp);
    } else {
      absl::StrAppendFormat(&line, "\"%g\"", lp);  // "-inf" / "inf" / "nan": not JSON numbers
    }
  }
  line += "]}";
  return line;
}

absl::StatusOr<JournalRecord> ParseRecordLine(const std::string& line) {
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
  if (r.window < 0 || n != static_cast<int64_t>(j["lp"].size())) {
    return absl::InvalidArgumentError("inconsistent record");
  }
  r.logprobs.reserve(static_cast<size_t>(n));
  for (const auto& v : j["lp"]) {
    if (!IsNumberOrSpecial(v)) return absl::InvalidArgumentError("non-numeric logprob");
    // %.9g text -> nearest double -> float is the float that was written (9 significant digits are
    // far inside half a float ulp, so the double rounding cannot cross a float midpoint).
    r.logprobs.push_back(static_cast<float>(NumberOrSpecial(v)));
  }
  return r;
}

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(const std::string& path,
                                                       const JournalIdentity& identity, int sync_every) {
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
  if (found.is_discarded() || !found.is_object() || !found.contains("journal") ||
      found["journal"] != kMagic) {
    return absl::FailedPreconditionError(absl::StrCat(
        "journal ", path, " does not start with a scored-ppl/1 header; use another --journal file"));
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
    absl::StatusOr<JournalRecord> record = ParseRecordLine(content->substr(pos, nl - pos));
    if (!record.ok()) {
      if (nl + 1 >= content->size()) break;  // unparseable last line: torn
      return absl::DataLossError(absl::StrCat("journal ", path, ": record at byte ", pos, " is corrupt (",
                                              record.status().message(), "); delete the file to start over"));
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

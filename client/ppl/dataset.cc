#include "client/ppl/dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace ppl {
namespace {

bool IsSpaceCodePoint(uint32_t c) {
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return true;
  if (c == 0x85 || c == 0xa0 || c == 0x1680) return true;
  if (c >= 0x2000 && c <= 0x200a) return true;
  return c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// Decodes the code point starting at text[i]; sets *len to its byte length. Invalid or truncated
// sequences decode as a 1-byte non-space (U+FFFD).
uint32_t DecodeAt(absl::string_view text, size_t i, size_t* len) {
  const auto b0 = static_cast<unsigned char>(text[i]);
  *len = 1;
  if (b0 < 0x80) return b0;
  size_t n = 0;
  uint32_t c = 0;
  if ((b0 & 0xe0) == 0xc0) {
    n = 2;
    c = b0 & 0x1f;
  } else if ((b0 & 0xf0) == 0xe0) {
    n = 3;
    c = b0 & 0x0f;
  } else if ((b0 & 0xf8) == 0xf0) {
    n = 4;
    c = b0 & 0x07;
  } else {
    return 0xfffd;
  }
  if (i + n > text.size()) return 0xfffd;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(text[i + k]);
    if ((b & 0xc0) != 0x80) return 0xfffd;
    c = (c << 6) | (b & 0x3f);
  }
  *len = n;
  return c;
}

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Python text-mode reading translates "\r\n" and lone "\r" to "\n" (universal newlines).
// The gzip members of `compressed`, one after another (as `gzip -d` / `zcat` read concatenated members),
// decompressed to at most max_bytes bytes. INVALID_ARGUMENT naming the path when it is not well-formed gzip
// or would decompress past max_bytes (a small file can expand a thousandfold).
absl::StatusOr<std::string> Gunzip(const std::string& path, const std::string& compressed,
                                   int64_t max_bytes) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) return absl::InternalError("zlib: inflateInit2 failed");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  z.avail_in = static_cast<uInt>(compressed.size());
  std::string out;
  char buffer[1 << 16];
  int rc = Z_OK;
  while (true) {
    z.next_out = reinterpret_cast<Bytef*>(buffer);
    z.avail_out = sizeof(buffer);
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buffer, sizeof(buffer) - z.avail_out);
    if (static_cast<int64_t>(out.size()) > max_bytes) {
      inflateEnd(&z);
      return absl::InvalidArgumentError(absl::StrCat(
          "data file ", path, " decompresses to more than --max_data_bytes ", max_bytes, " bytes"));
    }
    if (rc == Z_STREAM_END) {
      if (z.avail_in == 0) break;
      inflateReset(&z);  // the next member
      continue;
    }
    if (rc != Z_OK && !(rc == Z_BUF_ERROR && z.avail_out == 0)) break;
    if (z.avail_in == 0 && z.avail_out != 0) {
      rc = Z_DATA_ERROR;
      break;
    }
  }
  const std::string why = z.msg != nullptr ? z.msg : (rc == Z_DATA_ERROR ? "truncated" : "corrupt");
  inflateEnd(&z);
  if (rc != Z_STREAM_END) {
    return absl::InvalidArgumentError(absl::StrCat("data file ", path, " is not valid gzip (", why,
                                                   " at compressed byte ", z.total_in, ")"));
  }
  return out;
}

// Containers scored-ppl does not read, by their magic bytes: a message saying so instead of a UTF-8 error.
absl::Status RefuseContainer(const std::string& path, absl::string_view content) {
  const char* kind = nullptr;
  if (absl::StartsWith(content, "PAR1")) kind = "Parquet";
  if (absl::StartsWith(content, "\x28\xb5\x2f\xfd")) kind = "zstd-compressed";
  if (absl::StartsWith(content, "BZh")) kind = "bzip2-compressed";
  if (absl::StartsWith(content,
                       "\xfd"
                       "7zXZ"))
    kind = "xz-compressed";
  if (kind == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("data file ", path, " is ", kind,
                   ", which scored-ppl does not read; it reads text, jsonl and "
                   "WikiText raw files, and gzip (.gz) of them: convert it, e.g. python -c \"import pandas "
                   "as p; p.read_parquet('IN').to_json('OUT.jsonl', "
                   "orient='records', lines=True)\" for Parquet, or zstd -d / bunzip2 / unxz"));
}

std::string UniversalNewlines(absl::string_view content) {
  std::string out;
  out.reserve(content.size());
  for (size_t i = 0; i < content.size(); ++i) {
    if (content[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < content.size() && content[i + 1] == '\n') ++i;
    } else {
      out.push_back(content[i]);
    }
  }
  return out;
}

}  // namespace

std::string FormatName(Format format) {
  switch (format) {
    case Format::kWikiText:
      return "wikitext";
    case Format::kText:
      return "text";
    case Format::kJsonl:
      return "jsonl";
  }
  return "unknown";
}

absl::StatusOr<Format> ParseFormat(absl::string_view name) {
  for (Format f : {Format::kWikiText, Format::kText, Format::kJsonl}) {
    if (name == FormatName(f)) return f;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown format '", name, "' (expected wikitext, text or jsonl)"));
}

Format FormatForPath(absl::string_view path) {
  absl::ConsumeSuffix(&path, ".gz");
  if (absl::EndsWith(path, ".raw")) return Format::kWikiText;
  if (absl::EndsWith(path, ".jsonl") || absl::EndsWith(path, ".json")) return Format::kJsonl;
  return Format::kText;
}

absl::string_view StripWhitespace(absl::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t len = 0;
    if (!IsSpaceCodePoint(DecodeAt(text, begin, &len))) break;
    begin += len;
  }
  // Scan forward to find the end of the last non-space code point (UTF-8 cannot be decoded backwards
  // safely when it may be invalid).
  size_t end = begin;
  for (size_t i = begin; i < text.size();) {
    size_t len = 0;
    const bool space = IsSpaceCodePoint(DecodeAt(text, i, &len));
    i += len;
    if (!space) end = i;
  }
  return text.substr(begin, end - begin);
}

bool IsWhitespaceOnly(absl::string_view text) { return StripWhitespace(text).empty(); }

std::vector<std::string> WikiTextRows(absl::string_view content) {
  const std::string text = UniversalNewlines(content);
  std::vector<std::string> rows;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    const size_t end = nl == std::string::npos ? text.size() : nl + 1;
    absl::string_view line(text.data() + start, end - start);
    rows.emplace_back(IsWhitespaceOnly(line) ? absl::string_view() : line);
    start = end;
  }
  return rows;
}

std::vector<std::string> SplitDocuments(absl::string_view content, absl::string_view separator) {
  std::vector<std::string> docs;
  auto add = [&docs](absl::string_view piece) {
    absl::string_view stripped = StripWhitespace(piece);
    if (!stripped.empty()) docs.emplace_back(stripped);
  };
  if (separator.empty()) {
    add(content);
    return docs;
  }
  size_t start = 0;
  while (true) {
    const size_t pos = content.find(separator, start);
    if (pos == absl::string_view::npos) {
      add(content.substr(start));
      break;
    }
    add(content.substr(start, pos - start));
    start = pos + separator.size();
  }
  return docs;
}

absl::StatusOr<std::vector<std::string>> JsonlDocuments(absl::string_view content,
                                                        const std::string& text_field) {
  std::vector<std::string> docs;
  size_t start = 0;
  int64_t line_no = 0;
  while (start < content.size()) {
    ++line_no;
    size_t nl = content.find('\n', start);
    if (nl == absl::string_view::npos) nl = content.size();
    absl::string_view line = content.substr(start, nl - start);
    start = nl + 1;
    if (IsWhitespaceOnly(line)) continue;
    nlohmann::json obj = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
    if (obj.is_discarded() || !obj.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat("jsonl line ", line_no, ": not a JSON object"));
    }
    auto it = obj.find(text_field);
    if (it == obj.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("jsonl line ", line_no, ": no field '", text_field, "' (set --text_field)"));
    }
    if (!it->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("jsonl line ", line_no, ": field '", text_field, "' is not a string"));
    }
    docs.push_back(it->get<std::string>());
  }
  return docs;
}

absl::StatusOr<Dataset> ParseDataset(absl::string_view content, Format format, absl::string_view separator,
                                     const std::string& text_field) {
  Dataset ds;
  ds.format = format;
  switch (format) {
    case Format::kWikiText:
      ds.whole_text = std::string(content);
      ds.rows = WikiTextRows(content);
      ds.documents.push_back(ds.whole_text);
      break;
    case Format::kText:
      ds.whole_text = std::string(content);
      ds.documents = SplitDocuments(content, separator);
      ds.rows = ds.documents;
      break;
    case Format::kJsonl: {
      auto docs = JsonlDocuments(content, text_field);
      if (!docs.ok()) return docs.status();
      ds.documents = *std::move(docs);
      ds.rows = ds.documents;
      ds.whole_text = absl::StrJoin(ds.documents, "\n\n");
      break;
    }
  }
  return ds;
}

int64_t FirstInvalidUtf8(absl::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char b0 = p[i];
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    // Length and the allowed range of the second byte (which rules out overlongs, surrogates and
    // code points above U+10FFFF), per RFC 3629's table of well-formed sequences.
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xbf;
    if (b0 >= 0xc2 && b0 <= 0xdf) {
      len = 2;
    } else if (b0 >= 0xe0 && b0 <= 0xef) {
      len = 3;
      if (b0 == 0xe0) lo = 0xa0;
      if (b0 == 0xed) hi = 0x9f;
    } else if (b0 >= 0xf0 && b0 <= 0xf4) {
      len = 4;
      if (b0 == 0xf0) lo = 0x90;
      if (b0 == 0xf4) hi = 0x8f;
    } else {
      return static_cast<int64_t>(i);
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return static_cast<int64_t>(i);
    for (size_t k = 2; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return static_cast<int64_t>(i);
    }
    i += len;
  }
  return -1;
}

absl::StatusOr<std::string> ReadDataFile(const std::string& path, int64_t max_bytes) {
  // stat() before open(): opening a FIFO would block until a writer comes.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(absl::StrCat("no data file ", path));
    return absl::InvalidArgumentError(absl::StrCat("cannot stat data file ", path, ": ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data file ", path, " is ", FileKind(st.st_mode), "; --data needs a regular file"));
  }
  if (st.st_size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("data file ", path, " has ", st.st_size,
                                                   " bytes, more than --max_data_bytes ", max_bytes));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open data file ", path, ": ", std::strerror(errno)));
  }
  // Re-checked on the opened file (the path may have been replaced since the stat), and the read is bounded
  // by max_bytes + 1 whatever the size said: a file that grows meanwhile is refused, not read forever.
  struct stat opened;
  if (::fstat(fd, &opened) != 0 || !S_ISREG(opened.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("data file ", path, " is not a regular file"));
  }
  std::string content;
  content.resize(static_cast<size_t>(opened.st_size));
  size_t got = 0;
  absl::Status status;
  for (;;) {
    if (got == content.size()) {
      if (static_cast<int64_t>(got) > max_bytes) break;
      content.resize(got + std::min<size_t>(size_t{1} << 20, static_cast<size_t>(max_bytes) + 1 - got));
    }
    const ssize_t n = ::read(fd, content.data() + got, content.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status =
          absl::InternalError(absl::StrCat("error reading data file ", path, ": ", std::strerror(errno)));
      break;
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (!status.ok()) return status;
  content.resize(got);
  if (static_cast<int64_t>(got) > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("data file ", path, " grew past --max_data_bytes ", max_bytes, " while being read"));
  }
  if (content.empty()) return absl::InvalidArgumentError(absl::StrCat("data file ", path, " is empty"));
  if (absl::StartsWith(content, "\x1f\x8b")) {
    absl::StatusOr<std::string> plain = Gunzip(path, content, max_bytes);
    if (!plain.ok()) return plain.status();
    content = *std::move(plain);
    if (content.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("data file ", path, " is empty (decompressed)"));
    }
  }
  if (absl::Status refused = RefuseContainer(path, content); !refused.ok()) return refused;
  const int64_t bad = FirstInvalidUtf8(content);
  if (bad >= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "data file %s is not valid UTF-8: invalid byte sequence at byte offset %d (byte 0x%02x)", path, bad,
        static_cast<unsigned char>(content[static_cast<size_t>(bad)])));
  }
  return content;
}

absl::StatusOr<Dataset> LoadDataset(const std::string& path, Format format, absl::string_view separator,
                                    const std::string& text_field, int64_t max_bytes) {
  absl::StatusOr<std::string> content = ReadDataFile(path, max_bytes);
  if (!content.ok()) return content.status();
  return ParseDataset(*content, format, separator, text_field);
}

std::string JoinRows(const std::vector<std::string>& rows, bool drop_empty) {
  if (!drop_empty) return absl::StrJoin(rows, "\n\n");
  std::vector<absl::string_view> kept;
  for (const std::string& r : rows) {
    if (!r.empty()) kept.push_back(r);
  }
  return absl::StrJoin(kept, "\n\n");
}

}  // namespace ppl
}  // namespace scored

#include "client/ppl/reference_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/status_macros.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace ppl {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the reference file format is little-endian");

constexpr char kMagic[8] = {'S', 'C', 'O', 'R', 'E', 'D', 'R', 'F'};
constexpr uint32_t kVersion = 1;
constexpr char kFormatName[] = "scored-reference/1";
constexpr uint32_t kWindowTag = 0x57444e57;   // "WNDW" as little-endian bytes
constexpr uint32_t kTrailerTag = 0x454e4f44;  // "DONE"
// u32 tag, i64 window, i32 n, i32 k, f64 sum_logprob.
constexpr int64_t kBlockHead = 4 + 8 + 4 + 4 + 8;
constexpr int64_t kTrailerBytes = 4 + 8 + 8 + 4;
// A header larger than this is not one this writer made.
constexpr uint32_t kMaxHeaderBytes = 1 << 24;

absl::Status IoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat("reference file ", path, ": ", what, ": ", std::strerror(errno)));
}

absl::Status Corrupt(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat("reference file ", path, ": ", what,
                                          " (run scored-ppl --save_reference again to remake it)"));
}

uint32_t Crc32(const char* data, int64_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (size > 0) {
    const uInt piece = static_cast<uInt>(std::min<int64_t>(size, int64_t{1} << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data), piece);
    data += piece;
    size -= piece;
  }
  return static_cast<uint32_t>(crc);
}

template <typename T>
void Put(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <typename T>
void PutArray(std::string* out, const std::vector<T>& v) {
  out->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
template <typename T>
T Get(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

int64_t BlockBytes(int64_t n, int64_t k) { return kBlockHead + n * (4 + 4 + 8) + n * k * 8 + 4; }

absl::Status WriteAll(int fd, const std::string& data, const std::string& path) {
  return WriteFully(fd, data) ? absl::OkStatus() : IoError("write", path);
}

// `size` bytes at `offset`; DATA_LOSS when the file ends first.
absl::StatusOr<std::string> ReadAt(int fd, int64_t offset, int64_t size, const std::string& path) {
  std::string out(static_cast<size_t>(size), '\0');
  int64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out.data() + done, static_cast<size_t>(size - done), offset + done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("read", path);
    }
    if (n == 0) return Corrupt(path, absl::StrCat("ends at byte ", offset + done, " inside a record"));
    done += n;
  }
  return out;
}

std::string HeaderJson(const ReferenceHeader& h) {
  nlohmann::ordered_json j;
  j["format"] = kFormatName;
  nlohmann::ordered_json identity = nlohmann::ordered_json::object();
  for (const auto& [name, value] : h.identity.fields) identity[name] = value;
  j["identity"] = identity;
  j["model_fingerprint"] = h.model_fingerprint;
  j["model_path"] = h.model_path;
  j["model_format"] = h.model_format;
  j["vocab_size"] = h.vocab_size;
  j["top_k"] = h.top_k;
  j["num_windows"] = h.num_windows;
  j["num_positions"] = h.num_positions;
  return j.dump();
}

absl::StatusOr<ReferenceHeader> ParseHeader(const std::string& text, const std::string& path) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != kFormatName || !j.contains("identity") ||
      !j["identity"].is_object()) {
    return Corrupt(path, "the header is not a scored-reference/1 header");
  }
  ReferenceHeader h;
  try {
    for (const auto& item : j["identity"].items())
      h.identity.Add(item.key(), item.value().get<std::string>());
    h.model_fingerprint = j.at("model_fingerprint").get<std::string>();
    h.model_path = j.at("model_path").get<std::string>();
    h.model_format = j.at("model_format").get<std::string>();
    h.vocab_size = j.at("vocab_size").get<int64_t>();
    h.top_k = j.at("top_k").get<int32_t>();
    h.num_windows = j.at("num_windows").get<int64_t>();
    h.num_positions = j.at("num_positions").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    return Corrupt(path, absl::StrCat("header field: ", e.what()));
  }
  if (h.vocab_size < 1 || h.top_k < 1 || h.top_k > h.vocab_size || h.num_windows < 0 || h.num_positions < 0) {
    return Corrupt(path, absl::StrCat("header has vocab_size ", h.vocab_size, ", top_k ", h.top_k,
                                      ", num_windows ", h.num_windows));
  }
  return h;
}

// The first field where a and b differ: (name, a's value, b's value).
std::optional<std::tuple<std::string, std::string, std::string>> FirstDifference(const ReferenceHeader& a,
                                                                                 const ReferenceHeader& b) {
  const size_t n = std::max(a.identity.fields.size(), b.identity.fields.size());
  for (size_t i = 0; i < n; ++i) {
    const bool in_a = i < a.identity.fields.size(), in_b = i < b.identity.fields.size();
    const std::string name = in_a ? a.identity.fields[i].first : b.identity.fields[i].first;
    const std::string va = in_a ? a.identity.fields[i].second : "(absent)";
    const std::string vb =
        in_b && b.identity.fields[i].first == name ? b.identity.fields[i].second : "(absent)";
    if (va != vb) return std::make_tuple(name, va, vb);
  }
  const std::pair<const char*, std::pair<std::string, std::string>> rest[] = {
      {"model_fingerprint", {a.model_fingerprint, b.model_fingerprint}},
      {"top_k", {absl::StrCat(a.top_k), absl::StrCat(b.top_k)}},
      {"vocab_size", {absl::StrCat(a.vocab_size), absl::StrCat(b.vocab_size)}},
      {"num_windows", {absl::StrCat(a.num_windows), absl::StrCat(b.num_windows)}},
      {"num_positions", {absl::StrCat(a.num_positions), absl::StrCat(b.num_positions)}},
  };
  for (const auto& [name, values] : rest) {
    if (values.first != values.second) return std::make_tuple(name, values.first, values.second);
  }
  return std::nullopt;
}

std::string Preamble(const std::string& header_json) {
  std::string out(kMagic, sizeof(kMagic));
  Put(&out, kVersion);
  Put(&out, static_cast<uint32_t>(header_json.size()));
  out += header_json;
  return out;
}

// The header of the file open at `fd` and the offset of its first block.
absl::StatusOr<std::pair<ReferenceHeader, int64_t>> ReadPreamble(int fd, const std::string& path,
                                                                 std::string* header_json) {
  SCORED_ASSIGN_OR_RETURN(const std::string head, ReadAt(fd, 0, 16, path));
  if (std::memcmp(head.data(), kMagic, sizeof(kMagic)) != 0) {
    return Corrupt(path, "not a scored reference file (no SCOREDRF magic)");
  }
  const uint32_t version = Get<uint32_t>(head.data() + 8);
  if (version != kVersion) {
    return absl::FailedPreconditionError(absl::StrCat("reference file ", path, " has format version ",
                                                      version, "; this scored-ppl reads version ", kVersion));
  }
  const uint32_t bytes = Get<uint32_t>(head.data() + 12);
  if (bytes > kMaxHeaderBytes) return Corrupt(path, absl::StrCat("header of ", bytes, " bytes"));
  SCORED_ASSIGN_OR_RETURN(*header_json, ReadAt(fd, 16, bytes, path));
  SCORED_ASSIGN_OR_RETURN(ReferenceHeader header, ParseHeader(*header_json, path));
  return std::make_pair(std::move(header), int64_t{16} + bytes);
}

// The block in `bytes` (its checksum and sizes checked against `header`).
absl::StatusOr<ReferenceWindow> ParseBlock(const std::string& bytes, const ReferenceHeader& header,
                                           const std::string& path) {
  if (static_cast<int64_t>(bytes.size()) < kBlockHead + 4 || Get<uint32_t>(bytes.data()) != kWindowTag) {
    return Corrupt(path, "a window block is malformed");
  }
  ReferenceWindow w;
  const char* p = bytes.data() + 4;
  w.window = Get<int64_t>(p);
  w.num_scored = Get<int32_t>(p + 8);
  w.k = Get<int32_t>(p + 12);
  w.sum_logprob = Get<double>(p + 16);
  if (w.num_scored < 1 || w.k != header.top_k ||
      BlockBytes(w.num_scored, w.k) != static_cast<int64_t>(bytes.size())) {
    return Corrupt(path, absl::StrCat("window ", w.window, "'s block has ", w.num_scored, " positions of k ",
                                      w.k, " in ", bytes.size(), " bytes"));
  }
  const int64_t body = static_cast<int64_t>(bytes.size()) - 4;
  if (Crc32(bytes.data(), body) != Get<uint32_t>(bytes.data() + body)) {
    return Corrupt(path, absl::StrCat("window ", w.window, "'s block fails its checksum"));
  }
  const int64_t n = w.num_scored, nk = n * w.k;
  p = bytes.data() + kBlockHead;
  auto take = [&p](auto* v, int64_t count) {
    v->resize(static_cast<size_t>(count));
    std::memcpy(v->data(), p, static_cast<size_t>(count) * sizeof((*v)[0]));
    p += count * static_cast<int64_t>(sizeof((*v)[0]));
  };
  take(&w.logprob, n);
  take(&w.entropy, n);
  take(&w.tail_mass, n);
  take(&w.top_ids, nk);
  take(&w.top_logprobs, nk);
  return w;
}

// The place and size of the record at `offset`, read from its head: a window block (tag kWindowTag, its
// bytes and window index), the trailer (kTrailerTag), or DATA_LOSS.
struct RecordPlace {
  uint32_t tag = 0;
  int64_t bytes = 0;
  int64_t window = -1;
};
absl::StatusOr<RecordPlace> PlaceRecord(int fd, int64_t offset, int64_t file_size,
                                        const ReferenceHeader& header, const std::string& path) {
  if (file_size - offset < 4)
    return Corrupt(path, absl::StrCat("ends at byte ", file_size, " inside a record"));
  SCORED_ASSIGN_OR_RETURN(const std::string tag, ReadAt(fd, offset, 4, path));
  RecordPlace place;
  place.tag = Get<uint32_t>(tag.data());
  if (place.tag == kTrailerTag) {
    place.bytes = kTrailerBytes;
  } else if (place.tag == kWindowTag) {
    if (file_size - offset < kBlockHead) return Corrupt(path, "ends inside a window block");
    SCORED_ASSIGN_OR_RETURN(const std::string head, ReadAt(fd, offset, kBlockHead, path));
    place.window = Get<int64_t>(head.data() + 4);
    const int32_t n = Get<int32_t>(head.data() + 12), k = Get<int32_t>(head.data() + 16);
    if (n < 1 || k != header.top_k || place.window < 0 || place.window >= header.num_windows) {
      return Corrupt(path, absl::StrCat("the block at byte ", offset, " has window ", place.window, ", ", n,
                                        " positions and k ", k));
    }
    place.bytes = BlockBytes(n, k);
  } else {
    return Corrupt(path, absl::StrCat("no record at byte ", offset));
  }
  if (file_size - offset < place.bytes) {
    return Corrupt(path, absl::StrCat("ends at byte ", file_size, " inside a record"));
  }
  return place;
}

absl::StatusOr<int64_t> FileSize(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return IoError("stat", path);
  return static_cast<int64_t>(st.st_size);
}

}  // namespace

double TailMass(absl::Span<const float> top_logprobs, int64_t vocab_size) {
  if (static_cast<int64_t>(top_logprobs.size()) >= vocab_size) return 0.0;
  double mass = 0.0;
  for (float lp : top_logprobs) mass += std::exp(static_cast<double>(lp));
  return std::clamp(1.0 - mass, 0.0, 1.0);
}

int64_t ReferenceFileBytes(int64_t num_windows, int64_t num_positions, int32_t top_k) {
  return 16 + 1024 + num_windows * (kBlockHead + 4) + num_positions * (16 + int64_t{8} * top_k) +
         kTrailerBytes;
}

ReferenceWriter::~ReferenceWriter() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<std::unique_ptr<ReferenceWriter>> ReferenceWriter::Open(const std::string& path,
                                                                       const ReferenceHeader& header,
                                                                       std::FILE* note_out) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("--save_reference ", path, " exists; give another file, or delete it to save again"));
  }
  const std::string partial = path + ".partial";
  const int fd = ::open(partial.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("open", partial);
  std::unique_ptr<ReferenceWriter> w(new ReferenceWriter(path, fd, header));
  w->header_json_ = HeaderJson(header);
  w->stored_.assign(static_cast<size_t>(header.num_windows), false);
  SCORED_ASSIGN_OR_RETURN(const int64_t size, FileSize(fd, partial));
  if (size == 0) {
    const std::string preamble = Preamble(w->header_json_);
    SCORED_RETURN_IF_ERROR(WriteAll(fd, preamble, partial));
    if (::fdatasync(fd) != 0) return IoError("fdatasync", partial);
    w->bytes_ = static_cast<int64_t>(preamble.size());
    return w;
  }
  // Resume: the same header, then every whole block; a torn or corrupt tail is cut off.
  std::string found_json;
  absl::StatusOr<std::pair<ReferenceHeader, int64_t>> found = ReadPreamble(fd, partial, &found_json);
  if (!found.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(partial, " is not a partial reference file (",
                                                      found.status().message(),
                                                      "): delete it to start over"));
  }
  if (const auto diff = FirstDifference(found->first, header); diff.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        partial, " was started by another run: its ", std::get<0>(*diff), " is '", std::get<1>(*diff),
        "', this run's '", std::get<2>(*diff), "' (delete it to start over)"));
  }
  int64_t offset = found->second;
  absl::Status tail;
  while (offset < size) {
    absl::StatusOr<RecordPlace> place = PlaceRecord(fd, offset, size, header, partial);
    if (!place.ok()) {
      tail = place.status();
      break;
    }
    if (place->tag == kTrailerTag) break;  // rewritten by Finish
    absl::StatusOr<std::string> bytes = ReadAt(fd, offset, place->bytes, partial);
    absl::StatusOr<ReferenceWindow> block =
        bytes.ok() ? ParseBlock(*bytes, header, partial) : absl::StatusOr<ReferenceWindow>(bytes.status());
    if (!block.ok()) {
      tail = block.status();
      break;
    }
    offset += place->bytes;
    if (w->stored_[static_cast<size_t>(block->window)]) continue;  // a duplicate: the first one counts
    w->stored_[static_cast<size_t>(block->window)] = true;
    w->positions_ += block->num_scored;
    w->resumed_.emplace(block->window, *std::move(block));
  }
  if (offset < size) {
    if (!tail.ok() && note_out != nullptr) {
      std::fprintf(note_out, "scored-ppl: %s: cutting off its last %lld bytes (%s)\n", partial.c_str(),
                   static_cast<long long>(size - offset), std::string(tail.message()).c_str());
    }
    if (::ftruncate(fd, offset) != 0) return IoError("truncate", partial);
  }
  if (::lseek(fd, offset, SEEK_SET) < 0) return IoError("seek", partial);
  w->bytes_ = offset;
  if (note_out != nullptr) {
    std::fprintf(note_out, "scored-ppl: resuming %s: %zu of %lld windows already stored\n", partial.c_str(),
                 w->resumed_.size(), static_cast<long long>(header.num_windows));
  }
  return w;
}

absl::Status ReferenceWriter::Append(const ReferenceWindow& window) {
  const int64_t n = window.num_scored, k = header_.top_k;
  const std::string partial = path_ + ".partial";
  if (window.window < 0 || window.window >= header_.num_windows ||
      stored_[static_cast<size_t>(window.window)]) {
    return absl::InvalidArgumentError(absl::StrCat("reference file ", partial, ": window ", window.window,
                                                   " is stored already or unknown"));
  }
  if (n < 1 || window.k != k || static_cast<int64_t>(window.logprob.size()) != n ||
      static_cast<int64_t>(window.entropy.size()) != n ||
      static_cast<int64_t>(window.top_ids.size()) != n * k ||
      static_cast<int64_t>(window.top_logprobs.size()) != n * k) {
    return absl::InvalidArgumentError(absl::StrCat("reference file ", partial, ": window ", window.window,
                                                   " has sizes that disagree with its ", n,
                                                   " positions and k ", k));
  }
  std::string block;
  block.reserve(static_cast<size_t>(BlockBytes(n, k)));
  Put(&block, kWindowTag);
  Put(&block, window.window);
  Put(&block, window.num_scored);
  Put(&block, window.k);
  Put(&block, window.sum_logprob);
  PutArray(&block, window.logprob);
  PutArray(&block, window.entropy);
  for (int64_t i = 0; i < n; ++i) {
    const absl::Span<const float> top(window.top_logprobs.data() + i * k, static_cast<size_t>(k));
    Put(&block, TailMass(top, header_.vocab_size));
  }
  PutArray(&block, window.top_ids);
  PutArray(&block, window.top_logprobs);
  Put(&block, Crc32(block.data(), static_cast<int64_t>(block.size())));
  SCORED_RETURN_IF_ERROR(WriteAll(fd_, block, partial));
  if (::fdatasync(fd_) != 0) return IoError("fdatasync", partial);
  bytes_ += static_cast<int64_t>(block.size());
  stored_[static_cast<size_t>(window.window)] = true;
  positions_ += n;
  return absl::OkStatus();
}

absl::Status ReferenceWriter::Finish() {
  const std::string partial = path_ + ".partial";
  const int64_t missing = std::count(stored_.begin(), stored_.end(), false);
  if (missing > 0 || positions_ != header_.num_positions) {
    return absl::FailedPreconditionError(absl::StrCat("reference file ", partial, ": ", missing, " of ",
                                                      header_.num_windows, " windows are not stored yet"));
  }
  std::string trailer;
  Put(&trailer, kTrailerTag);
  Put(&trailer, header_.num_windows);
  Put(&trailer, header_.num_positions);
  Put(&trailer, Crc32(header_json_.data(), static_cast<int64_t>(header_json_.size())));
  SCORED_RETURN_IF_ERROR(WriteAll(fd_, trailer, partial));
  if (::fdatasync(fd_) != 0) return IoError("fdatasync", partial);
  if (::close(fd_) != 0) {
    fd_ = -1;
    return IoError("close", partial);
  }
  fd_ = -1;
  bytes_ += static_cast<int64_t>(trailer.size());
  if (::rename(partial.c_str(), path_.c_str()) != 0) return IoError("rename to " + path_, partial);
  // The rename itself durable: sync the folder.
  const size_t slash = path_.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path_.substr(0, slash));
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return absl::OkStatus();
}

ReferenceFile::~ReferenceFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<std::unique_ptr<ReferenceFile>> ReferenceFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("--reference_file ", path,
                                              " does not exist (make it with scored-ppl --save_reference)"));
    }
    return IoError("open", path);
  }
  std::unique_ptr<ReferenceFile> file(new ReferenceFile(path, fd));
  struct stat st;
  if (::fstat(fd, &st) != 0) return IoError("stat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("--reference_file ", path, " is not a regular file"));
  }
  const int64_t size = static_cast<int64_t>(st.st_size);
  std::string header_json;
  SCORED_ASSIGN_OR_RETURN(auto preamble, ReadPreamble(fd, path, &header_json));
  file->header_ = std::move(preamble.first);
  const ReferenceHeader& h = file->header_;
  file->blocks_.assign(static_cast<size_t>(h.num_windows), {-1, 0});
  int64_t offset = preamble.second;
  while (true) {
    SCORED_ASSIGN_OR_RETURN(const RecordPlace place, PlaceRecord(fd, offset, size, h, path));
    if (place.tag == kTrailerTag) break;
    auto& slot = file->blocks_[static_cast<size_t>(place.window)];
    if (slot.first >= 0) return Corrupt(path, absl::StrCat("window ", place.window, " is stored twice"));
    slot = {offset, place.bytes};
    offset += place.bytes;
  }
  SCORED_ASSIGN_OR_RETURN(const std::string trailer, ReadAt(fd, offset, kTrailerBytes, path));
  if (offset + kTrailerBytes != size || Get<int64_t>(trailer.data() + 4) != h.num_windows ||
      Get<int64_t>(trailer.data() + 12) != h.num_positions ||
      Get<uint32_t>(trailer.data() + 20) !=
          Crc32(header_json.data(), static_cast<int64_t>(header_json.size()))) {
    return Corrupt(path, "its trailer does not match its header");
  }
  for (size_t i = 0; i < file->blocks_.size(); ++i) {
    if (file->blocks_[i].first < 0) return Corrupt(path, absl::StrCat("window ", i, " is missing"));
  }
  return file;
}

absl::Status ReferenceFile::CheckRun(const JournalIdentity& run) const {
  ReferenceHeader mine = header_;
  mine.identity = run;
  if (const auto diff = FirstDifference(header_, mine); diff.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--reference_file ", path_, " was saved by a run with ", std::get<0>(*diff), " '", std::get<1>(*diff),
        "' but this run has '", std::get<2>(*diff),
        "': score with the tokenizer, --data, --method, --ctx, --stride and --max_windows the file was saved "
        "with (its windows must be this run's), or save a reference for this run"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ReferenceWindow> ReferenceFile::Read(int64_t window) const {
  if (window < 0 || window >= static_cast<int64_t>(blocks_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("reference file ", path_, " has no window ", window, " (", blocks_.size(), " windows)"));
  }
  const auto [offset, bytes] = blocks_[static_cast<size_t>(window)];
  SCORED_ASSIGN_OR_RETURN(const std::string block, ReadAt(fd_, offset, bytes, path_));
  SCORED_ASSIGN_OR_RETURN(ReferenceWindow w, ParseBlock(block, header_, path_));
  if (w.window != window) return Corrupt(path_, absl::StrCat("the block of window ", window, " moved"));
  return w;
}

}  // namespace ppl
}  // namespace scored

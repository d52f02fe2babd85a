#include "engine/model/fingerprint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/base/json_util.h"
#include "engine/base/sha256.h"
#include "engine/base/status_macros.h"
#include "engine/model/family.h"

namespace scored {
namespace {

constexpr int64_t kSampleBytes = 4096;
constexpr int64_t kNumSamples = 64;

void PutU64(Sha256* h, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  h->Update(b, 8);
}

absl::StatusOr<std::string> ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return ss.str();
}

class File {
 public:
  explicit File(int fd) : fd_(fd) {}
  ~File() {
    if (fd_ >= 0) close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

absl::Status ReadAt(const File& f, const std::string& path, int64_t offset, int64_t size, std::string* out) {
  out->resize(static_cast<size_t>(size));
  int64_t done = 0;
  while (done < size) {
    const ssize_t n = pread(f.fd(), out->data() + done, static_cast<size_t>(size - done), offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::DataLossError(absl::StrCat(path, ": short read at offset ", offset + done));
    done += n;
  }
  return absl::OkStatus();
}

absl::Status HashSafetensors(const std::string& dir, const std::string& name, Sha256* h) {
  const std::string path = dir + "/" + name;
  File f(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (f.fd() < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  struct stat st;
  if (fstat(f.fd(), &st) != 0) return absl::InternalError(absl::StrCat(path, ": fstat failed"));
  const int64_t size = static_cast<int64_t>(st.st_size);
  PutU64(h, name.size());
  h->Update(name);
  PutU64(h, static_cast<uint64_t>(size));
  std::string buf;
  if (size < 8)
    return absl::DataLossError(absl::StrCat(path, ": truncated: shorter than the 8-byte header length"));
  SCORED_RETURN_IF_ERROR(ReadAt(f, path, 0, 8, &buf));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(buf[static_cast<size_t>(i)]);
  if (n > static_cast<uint64_t>(size - 8)) {
    return absl::DataLossError(absl::StrCat(path, ": header length ", n, " exceeds the file"));
  }
  h->Update(buf);
  SCORED_RETURN_IF_ERROR(ReadAt(f, path, 8, static_cast<int64_t>(n), &buf));
  h->Update(buf);
  const int64_t start = 8 + static_cast<int64_t>(n);
  const int64_t data = size - start;
  if (data <= kNumSamples * kSampleBytes) {
    SCORED_RETURN_IF_ERROR(ReadAt(f, path, start, data, &buf));
    h->Update(buf);
    return absl::OkStatus();
  }
  for (int64_t i = 0; i < kNumSamples; ++i) {
    const int64_t off = i * (data - kSampleBytes) / (kNumSamples - 1);
    SCORED_RETURN_IF_ERROR(ReadAt(f, path, start + off, kSampleBytes, &buf));
    h->Update(buf);
  }
  return absl::OkStatus();
}

// The checkpoint files of the family config.json names, read leniently: the fingerprint of a folder does
// not depend on its config being supported, so an unparsable or unknown config gets the HF safetensors
// layout (that of every family today).
CheckpointFiles CheckpointFilesOf(const std::string& config_text) {
  absl::StatusOr<json_util::Json> j = json_util::ParseObject(config_text, "config.json");
  if (!j.ok()) return kHfSafetensorsCheckpoint;
  const json_util::Json* archs = json_util::Find(*j, "architectures");
  if (archs != nullptr && archs->is_array() && archs->size() == 1 && (*archs)[0].is_string()) {
    if (const FamilyTraits* family = FindFamily((*archs)[0].get<std::string>())) return family->checkpoint;
  }
  return kHfSafetensorsCheckpoint;
}

}  // namespace

absl::StatusOr<std::string> ModelFingerprint(const std::string& model_dir) {
  Sha256 h;
  h.Update("scored-model-fingerprint-v1\n");
  SCORED_ASSIGN_OR_RETURN(std::string config, ReadWhole(model_dir + "/config.json"));
  PutU64(&h, config.size());
  h.Update(config);

  const CheckpointFiles checkpoint = CheckpointFilesOf(config);
  std::set<std::string> files;  // sorted
  const std::string index_path = absl::StrCat(model_dir, "/", checkpoint.index_file);
  struct stat st;
  if (stat(index_path.c_str(), &st) == 0) {
    SCORED_ASSIGN_OR_RETURN(std::string text, ReadWhole(index_path));
    SCORED_ASSIGN_OR_RETURN(json_util::Json j, json_util::ParseObject(text, index_path));
    const json_util::Json* wm = json_util::Find(j, "weight_map");
    if (wm == nullptr || !wm->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": missing 'weight_map'"));
    }
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string() || it.value().get<std::string>().find('/') != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(index_path, ": bad shard for '", it.key(), "'"));
      }
      files.insert(it.value().get<std::string>());
    }
  } else {
    files.insert(checkpoint.single_file);
  }
  for (const std::string& name : files) SCORED_RETURN_IF_ERROR(HashSafetensors(model_dir, name, &h));
  return h.HexDigest();
}

}  // namespace scored

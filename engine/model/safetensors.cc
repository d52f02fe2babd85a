#include "engine/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/base/json_util.h"
#include "engine/base/status_macros.h"

namespace scored {

namespace {

bool ParseDType(const std::string& s, DType* out) {
  static const std::pair<const char*, DType> kNames[] = {
      {"F64", DType::kF64},   {"F32", DType::kF32},        {"F16", DType::kF16},
      {"BF16", DType::kBF16}, {"F8_E4M3", DType::kF8E4M3}, {"I8", DType::kI8},
      {"U8", DType::kU8},     {"I32", DType::kI32},        {"I64", DType::kI64},
  };
  for (const auto& [name, dtype] : kNames) {
    if (s == name) {
      *out = dtype;
      return true;
    }
  }
  return false;
}

// Closes a file descriptor on scope exit.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

}  // namespace

class SafetensorsParser {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

 private:
  static absl::Status ParseHeader(SafetensorsFile* f, const uint8_t* base, int64_t file_size);
};

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsParser::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
  }
  FdCloser closer(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) return absl::InternalError(absl::StrCat(path, ": fstat failed"));
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  const int64_t file_size = static_cast<int64_t>(st.st_size);
  if (file_size < 8) {
    return absl::DataLossError(
        absl::StrCat(path, ": truncated: ", file_size, " bytes, shorter than the 8-byte header length"));
  }
  void* map = mmap(nullptr, static_cast<size_t>(file_size), PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat(path, ": mmap failed: ", std::strerror(errno)));
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->map_ = map;
  f->map_size_ = file_size;
  SCORED_RETURN_IF_ERROR(ParseHeader(f.get(), static_cast<const uint8_t*>(map), file_size));
  return f;
}

absl::Status SafetensorsParser::ParseHeader(SafetensorsFile* f, const uint8_t* base, int64_t file_size) {
  const std::string& path = f->path_;
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];
  if (header_len > static_cast<uint64_t>(file_size - 8)) {
    return absl::DataLossError(absl::StrCat(path, ": header length ", header_len, " exceeds the ",
                                            file_size - 8, " bytes after the length field"));
  }
  const int64_t n = static_cast<int64_t>(header_len);
  const char* header = reinterpret_cast<const char*>(base + 8);
  json_util::Json j = json_util::Json::parse(header, header + n, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": malformed header JSON"));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": header JSON is not an object"));

  const int64_t data_start = 8 + n;
  const int64_t data_size = file_size - data_start;
  struct Range {
    int64_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const json_util::Json& v = it.value();
    if (name == "__metadata__") {
      if (v.is_null()) continue;
      if (!v.is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": __metadata__ is not an object"));
      }
      for (auto m = v.begin(); m != v.end(); ++m) {
        f->metadata_[m.key()] = m.value().is_string() ? m.value().get<std::string>() : m.value().dump();
      }
      continue;
    }
    auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "': ", what));
    };
    if (!v.is_object()) return bad("entry is not an object");
    const json_util::Json* dt = json_util::Find(v, "dtype");
    if (dt == nullptr || !dt->is_string()) return bad("missing or non-string 'dtype'");
    TensorView t;
    t.name = name;
    t.file = path;
    if (!ParseDType(dt->get<std::string>(), &t.dtype)) {
      return bad(absl::StrCat("unknown or unsupported dtype '", dt->get<std::string>(),
                              "' (supported: F32 F16 BF16 F8_E4M3 I8 U8 I32 I64)"));
    }
    const json_util::Json* shape = json_util::Find(v, "shape");
    if (shape == nullptr || !shape->is_array()) return bad("missing or non-list 'shape'");
    int64_t count = 1;
    for (const json_util::Json& d : *shape) {
      std::optional<int64_t> dim =
          d.is_number_integer() || d.is_number_unsigned() ? json_util::AsInt(d) : std::nullopt;
      if (!dim.has_value() || *dim < 0) return bad(absl::StrCat("bad shape dimension ", d.dump()));
      t.shape.push_back(*dim);
      if (__builtin_mul_overflow(count, *dim, &count)) return bad("shape element count overflows");
    }
    int64_t nbytes = 0;
    if (__builtin_mul_overflow(count, DTypeSize(t.dtype), &nbytes)) return bad("shape byte size overflows");
    const json_util::Json* offs = json_util::Find(v, "data_offsets");
    if (offs == nullptr || !offs->is_array() || offs->size() != 2)
      return bad("'data_offsets' must be [begin, end]");
    std::optional<int64_t> b = json_util::AsInt((*offs)[0]);
    std::optional<int64_t> e = json_util::AsInt((*offs)[1]);
    if (!b.has_value() || !e.has_value() || !(*offs)[0].is_number_integer() ||
        !(*offs)[1].is_number_integer() || *b < 0 || *b > *e) {
      return bad(absl::StrCat("bad data_offsets ", offs->dump()));
    }
    if (*e > data_size) {
      return absl::DataLossError(absl::StrCat(path, ": tensor '", name, "': data_offsets ", offs->dump(),
                                              " outside the ", data_size, "-byte data section"));
    }
    if (*e - *b != nbytes) {
      return bad(absl::StrCat("data_offsets span ", *e - *b, " bytes but shape x ", DTypeName(t.dtype),
                              " needs ", nbytes));
    }
    t.data = base + data_start + *b;
    t.nbytes = nbytes;
    auto [pos, inserted] = f->tensors_.emplace(name, std::move(t));
    if (!inserted) return bad("duplicate tensor name");
    ranges.push_back({*b, *e, &pos->first});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& x, const Range& y) {
    return x.begin != y.begin ? x.begin < y.begin : x.end < y.end;
  });
  int64_t prev_end = 0;
  const std::string* prev_name = nullptr;
  for (const Range& r : ranges) {
    if (r.begin == r.end) continue;  // empty tensors occupy no bytes
    if (prev_name != nullptr && r.begin < prev_end) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", *r.name, "' overlaps tensor '", *prev_name, "'"));
    }
    prev_end = r.end;
    prev_name = r.name;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  return SafetensorsParser::Open(path);
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(map_, static_cast<size_t>(map_size_));
}

bool SafetensorsFile::Maps(const uint8_t* data, int64_t nbytes) const {
  const auto begin = reinterpret_cast<uintptr_t>(map_);
  const auto p = reinterpret_cast<uintptr_t>(data);
  return map_ != nullptr && nbytes >= 0 && p >= begin && p - begin <= static_cast<uintptr_t>(map_size_) &&
         static_cast<uintptr_t>(nbytes) <= static_cast<uintptr_t>(map_size_) - (p - begin);
}

void SafetensorsFile::ReleaseResidentPages(const uint8_t* data, int64_t nbytes) const {
  if (nbytes <= 0 || !Maps(data, nbytes)) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto map_begin = reinterpret_cast<uintptr_t>(map_);  // page-aligned (mmap)
  const uintptr_t map_end = map_begin + (static_cast<uintptr_t>(map_size_) + page - 1) / page * page;
  const uintptr_t first = reinterpret_cast<uintptr_t>(data) / page * page;
  const uintptr_t last =
      std::min(map_end, (reinterpret_cast<uintptr_t>(data) + nbytes + page - 1) / page * page);
  // Advice only: a failure leaves the pages resident, which is still correct.
  madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

namespace {

bool FileExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TensorStore>> TensorStore::Open(const std::string& model_dir,
                                                               const CheckpointFiles& files) {
  std::unique_ptr<TensorStore> store(new TensorStore());
  store->dir_ = model_dir;
  const std::string index_path = absl::StrCat(model_dir, "/", files.index_file);
  const std::string single_path = absl::StrCat(model_dir, "/", files.single_file);
  if (FileExists(index_path)) {
    std::ifstream in(index_path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat(index_path, ": cannot open"));
    std::ostringstream ss;
    ss << in.rdbuf();
    SCORED_ASSIGN_OR_RETURN(json_util::Json j, json_util::ParseObject(ss.str(), index_path));
    const json_util::Json* wm = json_util::Find(j, "weight_map");
    if (wm == nullptr || !wm->is_object() || wm->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": missing or empty 'weight_map'"));
    }
    std::map<std::string, std::string> want;  // tensor -> shard file name
    std::set<std::string> shards;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(index_path, ": weight_map entry for '", it.key(), "' is not a string"));
      }
      const std::string shard = it.value().get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
        return absl::InvalidArgumentError(
            absl::StrCat(index_path, ": tensor '", it.key(), "' names a bad shard file '", shard, "'"));
      }
      want[it.key()] = shard;
      shards.insert(shard);
    }
    std::map<std::string, const SafetensorsFile*> by_shard;
    for (const std::string& shard : shards) {
      SCORED_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f,
                              SafetensorsFile::Open(model_dir + "/" + shard));
      by_shard[shard] = f.get();
      store->files_.push_back(std::move(f));
    }
    for (const auto& [name, shard] : want) {
      const SafetensorsFile* f = by_shard[shard];
      if (f->tensors().count(name) == 0) {
        return absl::DataLossError(absl::StrCat(index_path, ": tensor '", name, "' is listed in shard '",
                                                shard, "' but ", f->path(), " does not hold it"));
      }
    }
  } else if (FileExists(single_path)) {
    SCORED_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::Open(single_path));
    store->files_.push_back(std::move(f));
  } else {
    return absl::NotFoundError(
        absl::StrCat(model_dir, ": neither ", files.single_file, " nor ", files.index_file, " found"));
  }
  for (const auto& f : store->files_) {
    for (const auto& [name, view] : f->tensors()) {
      auto [it, inserted] = store->index_.emplace(name, &view);
      if (!inserted) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", name, "' appears in both ", it->second->file, " and ", f->path()));
      }
    }
  }
  return store;
}

absl::StatusOr<TensorView> TensorStore::Get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(absl::StrCat("tensor '", name, "' not found in ", dir_));
  }
  return *it->second;
}

bool TensorStore::Has(const std::string& name) const { return index_.count(name) != 0; }

void TensorStore::ReleaseResidentPages(const TensorView& view) const {
  if (!view.present()) return;
  for (const auto& file : files_) {
    if (file->Maps(view.data, view.nbytes)) {
      file->ReleaseResidentPages(view.data, view.nbytes);
      return;
    }
  }
}

std::vector<std::string> TensorStore::Names() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [name, view] : index_) names.push_back(name);
  return names;
}

}  // namespace scored

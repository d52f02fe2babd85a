#include "engine/model/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/model/gguf_quants.h"

namespace scored {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kDefaultAlignment = 32;
// Bounds against hostile headers: counts and lengths a real file never comes near.
constexpr uint64_t kMaxCount = uint64_t{1} << 24;
constexpr uint64_t kMaxString = uint64_t{1} << 26;
constexpr uint32_t kMaxDims = 4;

// GGUF's value types (GGUF_TYPE_*).
enum : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

const char* ValueTypeName(uint32_t t) {
  static const char* const kNames[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
                                       "bool",  "string", "array",  "uint64", "int64",  "float64"};
  return t < 13 ? kNames[t] : "unknown";
}

// A bounds-checked little-endian reader over the mapping.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* data, size_t size) : path_(path), data_(data), size_(size) {}
  size_t pos() const { return pos_; }

  template <typename T>
  absl::StatusOr<T> Read(const char* what) {
    if (size_ - pos_ < sizeof(T)) return Truncated(what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  absl::StatusOr<std::string> String(const char* what) {
    SCORED_ASSIGN_OR_RETURN(const uint64_t n, Read<uint64_t>(what));
    if (n > kMaxString) return Bad(absl::StrCat(what, ": a string of ", n, " bytes"));
    if (size_ - pos_ < n) return Truncated(what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }

  absl::Status Bad(const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": not a valid GGUF file: ", what, " (at byte ", pos_, ")"));
  }

 private:
  absl::Status Truncated(const char* what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": truncated GGUF file: ", what,
                                                   " runs past its end (at byte ", pos_, " of ", size_, ")"));
  }

  const std::string& path_;
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// A scalar of type T into *out (converted).
template <typename T, typename Out>
absl::Status Scalar(Cursor* c, Out* out) {
  SCORED_ASSIGN_OR_RETURN(const T v, c->Read<T>("a value"));
  *out = static_cast<Out>(v);
  return absl::OkStatus();
}

absl::StatusOr<GgufValue> ReadValue(Cursor* c, uint32_t type, bool in_array) {
  GgufValue v;
  v.type = type;
  absl::Status status;
  switch (type) {
    case kU8:
      status = Scalar<uint8_t>(c, &v.u);
      break;
    case kU16:
      status = Scalar<uint16_t>(c, &v.u);
      break;
    case kU32:
      status = Scalar<uint32_t>(c, &v.u);
      break;
    case kU64:
      status = Scalar<uint64_t>(c, &v.u);
      break;
    case kI8:
      v.kind = GgufValue::Kind::kInt;
      status = Scalar<int8_t>(c, &v.i);
      break;
    case kI16:
      v.kind = GgufValue::Kind::kInt;
      status = Scalar<int16_t>(c, &v.i);
      break;
    case kI32:
      v.kind = GgufValue::Kind::kInt;
      status = Scalar<int32_t>(c, &v.i);
      break;
    case kI64:
      v.kind = GgufValue::Kind::kInt;
      status = Scalar<int64_t>(c, &v.i);
      break;
    case kF32:
      v.kind = GgufValue::Kind::kFloat;
      status = Scalar<float>(c, &v.f);
      break;
    case kF64:
      v.kind = GgufValue::Kind::kFloat;
      status = Scalar<double>(c, &v.f);
      break;
    case kBool:
      v.kind = GgufValue::Kind::kBool;
      status = Scalar<uint8_t>(c, &v.u);
      if (status.ok() && v.u > 1) return c->Bad(absl::StrCat("a bool of value ", v.u));
      break;
    case kString: {
      v.kind = GgufValue::Kind::kString;
      SCORED_ASSIGN_OR_RETURN(v.s, c->String("a string value"));
      break;
    }
    case kArray: {
      if (in_array) return c->Bad("an array of arrays");
      v.kind = GgufValue::Kind::kArray;
      SCORED_ASSIGN_OR_RETURN(const uint32_t elem, c->Read<uint32_t>("an array's element type"));
      SCORED_ASSIGN_OR_RETURN(const uint64_t n, c->Read<uint64_t>("an array's length"));
      if (n > kMaxCount) return c->Bad(absl::StrCat("an array of ", n, " elements"));
      v.array.reserve(static_cast<size_t>(n));
      for (uint64_t k = 0; k < n; ++k) {
        SCORED_ASSIGN_OR_RETURN(GgufValue e, ReadValue(c, elem, /*in_array=*/true));
        v.array.push_back(std::move(e));
      }
      break;
    }
    default:
      return c->Bad(absl::StrCat("unknown value type ", type));
  }
  SCORED_RETURN_IF_ERROR(status);
  return v;
}

}  // namespace

int64_t GgufTensor::NumElements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string GgufTypeName(uint32_t ggml_type) {
  const GgmlTypeInfo* t = FindGgmlType(ggml_type);
  return t != nullptr ? t->name : absl::StrCat("type ", ggml_type);
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* map = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      close(fd);
      return absl::ResourceExhaustedError(absl::StrCat(path, ": mmap failed: ", std::strerror(errno)));
    }
    f->map_ = static_cast<const uint8_t*>(map);
  }
  close(fd);
  SCORED_RETURN_IF_ERROR(f->Parse());
  return f;
}

GgufFile::~GgufFile() {
  if (map_ != nullptr) munmap(const_cast<uint8_t*>(map_), size_);
}

absl::Status GgufFile::Parse() {
  Cursor c(path_, map_, size_);
  SCORED_ASSIGN_OR_RETURN(const uint32_t magic, c.Read<uint32_t>("the magic"));
  if (magic != kMagic) return c.Bad("no GGUF magic");
  SCORED_ASSIGN_OR_RETURN(version_, c.Read<uint32_t>("the version"));
  if (version_ != 2 && version_ != 3) return c.Bad(absl::StrCat("version ", version_, " (2 and 3 are read)"));
  SCORED_ASSIGN_OR_RETURN(const uint64_t n_tensors, c.Read<uint64_t>("the tensor count"));
  SCORED_ASSIGN_OR_RETURN(const uint64_t n_kv, c.Read<uint64_t>("the metadata count"));
  if (n_tensors > kMaxCount || n_kv > kMaxCount) {
    return c.Bad(absl::StrCat(n_tensors, " tensors and ", n_kv, " metadata entries"));
  }
  for (uint64_t k = 0; k < n_kv; ++k) {
    SCORED_ASSIGN_OR_RETURN(std::string key, c.String("a metadata key"));
    SCORED_ASSIGN_OR_RETURN(const uint32_t type, c.Read<uint32_t>("a metadata value type"));
    SCORED_ASSIGN_OR_RETURN(GgufValue v, ReadValue(&c, type, /*in_array=*/false));
    if (!metadata_.emplace(key, std::move(v)).second)
      return c.Bad(absl::StrCat("metadata key '", key, "' twice"));
  }
  uint32_t alignment = kDefaultAlignment;
  if (const GgufValue* a = Find("general.alignment")) {
    if (a->kind != GgufValue::Kind::kUint || a->u == 0 || (a->u & (a->u - 1)) != 0 || a->u > 4096) {
      return c.Bad("general.alignment is not a power of two up to 4096");
    }
    alignment = static_cast<uint32_t>(a->u);
  }
  tensors_.resize(static_cast<size_t>(n_tensors));
  for (GgufTensor& t : tensors_) {
    SCORED_ASSIGN_OR_RETURN(t.name, c.String("a tensor name"));
    SCORED_ASSIGN_OR_RETURN(const uint32_t n_dims, c.Read<uint32_t>("a tensor's dimension count"));
    if (n_dims == 0 || n_dims > kMaxDims)
      return c.Bad(absl::StrCat("tensor '", t.name, "' has ", n_dims, " dims"));
    for (uint32_t d = 0; d < n_dims; ++d) {
      SCORED_ASSIGN_OR_RETURN(const uint64_t dim, c.Read<uint64_t>("a tensor dimension"));
      if (dim == 0 || dim > (uint64_t{1} << 40))
        return c.Bad(absl::StrCat("tensor '", t.name, "' dimension ", dim));
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    SCORED_ASSIGN_OR_RETURN(t.type, c.Read<uint32_t>("a tensor type"));
    SCORED_ASSIGN_OR_RETURN(t.offset, c.Read<uint64_t>("a tensor offset"));
    const GgmlTypeInfo* info = FindGgmlType(t.type);
    if (info == nullptr) return c.Bad(absl::StrCat("tensor '", t.name, "' has unknown ggml type ", t.type));
    if (t.dims[0] % info->block_size != 0) {
      return c.Bad(absl::StrCat("tensor '", t.name, "': rows of ", t.dims[0], " elements are not whole ",
                                info->name, " blocks of ", info->block_size));
    }
    int64_t elements = 1;
    for (int64_t d : t.dims) {
      if (elements > std::numeric_limits<int64_t>::max() / d)
        return c.Bad(absl::StrCat("tensor '", t.name, "' is too large"));
      elements *= d;
    }
    t.nbytes = elements / info->block_size * info->type_size;
    if (!tensor_index_.emplace(t.name, static_cast<size_t>(&t - tensors_.data())).second) {
      return c.Bad(absl::StrCat("tensor '", t.name, "' twice"));
    }
  }
  const size_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
  for (GgufTensor& t : tensors_) {
    if (t.offset % alignment != 0 || data_start > size_ || t.offset > size_ - data_start ||
        static_cast<uint64_t>(t.nbytes) > size_ - data_start - t.offset) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor '", t.name, "' (", GgufTypeName(t.type),
                                                     ", ", t.nbytes, " bytes at data offset ", t.offset,
                                                     ") lies outside the file or is not ", alignment,
                                                     "-byte aligned (file of ", size_, " bytes)"));
    }
    t.data = map_ + data_start + t.offset;
  }
  return absl::OkStatus();
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::FindTensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<int64_t> GgufFile::GetInt(const std::string& key, std::optional<int64_t> def) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) {
    if (def.has_value()) return *def;
    return absl::NotFoundError(absl::StrCat(path_, ": metadata key '", key, "' is missing"));
  }
  if (v->kind == GgufValue::Kind::kInt) return v->i;
  if (v->kind == GgufValue::Kind::kUint &&
      v->u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(v->u);
  }
  return absl::InvalidArgumentError(absl::StrCat(path_, ": metadata key '", key, "' is a ",
                                                 ValueTypeName(v->type), ", expected an integer"));
}

absl::StatusOr<double> GgufFile::GetFloat(const std::string& key, std::optional<double> def) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) {
    if (def.has_value()) return *def;
    return absl::NotFoundError(absl::StrCat(path_, ": metadata key '", key, "' is missing"));
  }
  if (v->kind == GgufValue::Kind::kFloat) return v->f;
  if (v->kind == GgufValue::Kind::kInt) return static_cast<double>(v->i);
  if (v->kind == GgufValue::Kind::kUint) return static_cast<double>(v->u);
  return absl::InvalidArgumentError(
      absl::StrCat(path_, ": metadata key '", key, "' is a ", ValueTypeName(v->type), ", expected a number"));
}

absl::StatusOr<std::string> GgufFile::GetString(const std::string& key,
                                                std::optional<std::string> def) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) {
    if (def.has_value()) return *def;
    return absl::NotFoundError(absl::StrCat(path_, ": metadata key '", key, "' is missing"));
  }
  if (v->kind == GgufValue::Kind::kString) return v->s;
  return absl::InvalidArgumentError(
      absl::StrCat(path_, ": metadata key '", key, "' is a ", ValueTypeName(v->type), ", expected a string"));
}

}  // namespace scored

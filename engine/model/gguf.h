// A GGUF file (llama.cpp's model format, versions 2 and 3) opened read-only: its metadata and its tensors'
// bytes, memory-mapped, zero-copy.
//
// Layout (little-endian; gguf.gguf_reader / ggml's gguf.cpp): "GGUF", version u32, tensor count u64, metadata
// count u64; each metadata entry a key (u64 length + UTF-8 bytes), a value type u32 and the value (integers
// of 8..64 bits, f32 / f64, bool, string, or an array: element type u32, count u64, elements); each tensor
// info a name, n_dims u32, dims u64[n_dims] (ggml order: dims[0] varies fastest, so a matrix [out, in] is
// stored with dims {in, out}), a ggml type u32 (gguf_quants.h) and an offset u64 from the start of the data
// section, which begins at the header's end rounded up to `general.alignment` (default 32). A tensor holds
// prod(dims) / block_size blocks of type_size bytes, its rows (dims[0] elements) block-aligned.
//
// Every read is bounds-checked: a truncated or inconsistent file is INVALID_ARGUMENT naming the file and what
// is wrong (the offset where it happened), never a read past the mapping. Split GGUF files (model-00001-of-
// 00003.gguf) are opened one by one by the caller.
//
// Thread-safety: immutable after Open; const methods are thread-safe.
#ifndef SCORED_ENGINE_MODEL_GGUF_H_
#define SCORED_ENGINE_MODEL_GGUF_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace scored {

// One metadata value. Arrays hold their elements (nested arrays are refused at parse: no published file has
// them and ggml does not read them).
struct GgufValue {
  enum class Kind { kUint, kInt, kFloat, kBool, kString, kArray };
  Kind kind = Kind::kUint;
  uint32_t type = 0;             // the file's value type id (GGUF_TYPE_*), for messages
  uint64_t u = 0;                // kUint (and kBool: 0 / 1)
  int64_t i = 0;                 // kInt
  double f = 0.0;                // kFloat (f32 widened)
  std::string s;                 // kString
  std::vector<GgufValue> array;  // kArray
};

struct GgufTensor {
  std::string name;
  uint32_t type = 0;              // ggml type id
  std::vector<int64_t> dims;      // ggml order: dims[0] fastest
  uint64_t offset = 0;            // from the data section's start
  int64_t nbytes = 0;             // prod(dims) / block_size * type_size
  const uint8_t* data = nullptr;  // into the mapping
  int64_t NumElements() const;
};

class GgufFile {
 public:
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  // nullptr when absent.
  const GgufValue* Find(const std::string& key) const;
  const GgufTensor* FindTensor(const std::string& name) const;

  // Typed metadata: NOT_FOUND naming the key when absent (or `def` when given), INVALID_ARGUMENT naming the
  // key and its type when it holds another type (integers of any width and sign convert when in range).
  absl::StatusOr<int64_t> GetInt(const std::string& key, std::optional<int64_t> def = std::nullopt) const;
  absl::StatusOr<double> GetFloat(const std::string& key, std::optional<double> def = std::nullopt) const;
  absl::StatusOr<std::string> GetString(const std::string& key,
                                        std::optional<std::string> def = std::nullopt) const;

 private:
  GgufFile() = default;
  absl::Status Parse();

  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// "Q4_K", "F32", ... or "type 99" for the metadata and tensor type names in messages.
std::string GgufTypeName(uint32_t ggml_type);

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_GGUF_H_

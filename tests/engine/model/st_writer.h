// Test helpers: a temporary folder and a small safetensors writer (tests build their own files).
#ifndef SCORED_TESTS_ENGINE_MODEL_ST_WRITER_H_
#define SCORED_TESTS_ENGINE_MODEL_ST_WRITER_H_

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace scored {
namespace testing_util {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "scored_model_test_XXXXXX").string();
    path_ = mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline bool WriteFile(const std::string& path, const std::string& bytes) {
  FILE* f = fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return fclose(f) == 0 && ok;
}

struct StTensor {
  std::string name;
  std::string dtype;  // safetensors spelling
  std::vector<int64_t> shape;
  std::string bytes;  // raw little-endian data
};

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

// u64 header length + header + data, as a safetensors writer lays it out (header padded with spaces
// to a multiple of 8, tensors back to back in the given order).
inline std::string RawFile(const std::string& header, const std::string& data) {
  std::string h = header;
  while (h.size() % 8 != 0) h += ' ';
  std::string out(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + h + data;
}

inline std::string SafetensorsBytes(const std::vector<StTensor>& tensors) {
  nlohmann::json h = nlohmann::json::object();
  h["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const StTensor& t : tensors) {
    h[t.name] = {{"dtype", t.dtype},
                 {"shape", t.shape},
                 {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  return RawFile(h.dump(), data);
}

inline bool WriteSafetensors(const std::string& path, const std::vector<StTensor>& tensors) {
  return WriteFile(path, SafetensorsBytes(tensors));
}

}  // namespace testing_util
}  // namespace scored

#endif  // SCORED_TESTS_ENGINE_MODEL_ST_WRITER_H_

// SHA-256 (FIPS 180-4), incremental.
//
//   Sha256 h;
//   h.Update(bytes, n);          // any number of times
//   std::string hex = h.HexDigest();   // 64 lowercase hex chars; finishes the hash
//
// A finished hasher must not be updated again (Update after Finish/HexDigest is ignored). Not
// thread-safe per object; independent objects may be used concurrently.
#ifndef SCORED_ENGINE_BASE_SHA256_H_
#define SCORED_ENGINE_BASE_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace scored {

class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t size);
  void Update(std::string_view bytes) { Update(bytes.data(), bytes.size()); }
  // Pads, finishes and returns the 32-byte digest (the same value on every later call).
  std::array<uint8_t, 32> Finish();
  std::string HexDigest();

 private:
  void Block(const uint8_t* p);  // one 64-byte block

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
  bool finished_ = false;
  std::array<uint8_t, 32> digest_{};
};

// Hex SHA-256 of a byte string.
std::string Sha256Hex(std::string_view bytes);

}  // namespace scored

#endif  // SCORED_ENGINE_BASE_SHA256_H_

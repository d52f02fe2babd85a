// Internal helpers of engine/model: reads of little-endian scalars from mmapped tensor bytes.
//
// Tensor data inside a safetensors file is not necessarily aligned (the data section starts right after
// a JSON header of any length), so every read goes through memcpy. The host is little-endian (x86-64,
// aarch64), as safetensors data is.
#ifndef SCORED_ENGINE_MODEL_RAW_READ_H_
#define SCORED_ENGINE_MODEL_RAW_READ_H_

#include <cstdint>
#include <cstring>

namespace scored {
namespace raw_read {

template <typename T>
inline T Load(const uint8_t* data, int64_t index) {
  T v;
  std::memcpy(&v, data + index * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

// Unsigned `bits`-wide field starting at global bit position `bit` of a little-endian int32 word array
// (compressed-tensors dense packing: element i at bits [i*b, i*b+b), LSB first, may straddle words).
inline uint32_t LoadPackedField(const uint8_t* words, int64_t bit, int bits) {
  const int64_t word = bit >> 5;
  const int shift = static_cast<int>(bit & 31);
  uint64_t v = Load<uint32_t>(words, word);
  if (shift + bits > 32) v |= static_cast<uint64_t>(Load<uint32_t>(words, word + 1)) << 32;
  return static_cast<uint32_t>((v >> shift) & ((uint64_t{1} << bits) - 1));
}

}  // namespace raw_read
}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_RAW_READ_H_

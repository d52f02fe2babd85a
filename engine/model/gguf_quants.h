// ggml's tensor types as GGUF files store them, and the exact decoding of their blocks to fp32.
//
// A GGUF tensor of a block type holds its rows as consecutive blocks of `block_size` elements, `type_size`
// bytes each (ggml's GGML_QUANT_SIZES). DequantizeGgmlBlocks gives, bit for bit, what the `gguf` Python
// package's own dequantization gives (gguf.quants, version 0.19: numpy in float32, every product and sum
// one fp32 operation in the order it writes them; ggml's ggml-quants.c computes the same): the block layouts
// and the order of each block's elements follow it. tests/engine/model/gguf_quants_test.cc checks every type
// against its output (tests/fixtures/gguf-blocks, scripts/fixtures/make_gguf_blocks.py).
//
// Decoded here: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS,
// MXFP4. Known but not decoded yet (UNIMPLEMENTED naming the type): the grid i-quants IQ2_XXS / IQ2_XS /
// IQ2_S / IQ3_XXS / IQ3_S / IQ1_S / IQ1_M and TQ1_0 / TQ2_0, NVFP4, Q8_1 / Q8_K (ggml's intermediate
// formats), the integer and F64 types.
//
// Thread-safety: pure functions over immutable data.
#ifndef SCORED_ENGINE_MODEL_GGUF_QUANTS_H_
#define SCORED_ENGINE_MODEL_GGUF_QUANTS_H_

#include <cstdint>

#include "absl/status/status.h"

namespace scored {

// ggml's type ids (GGML_TYPE_*; gguf.GGMLQuantizationType).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
};

struct GgmlTypeInfo {
  GgmlType type;
  const char* name;    // "Q4_K"
  int64_t block_size;  // elements per block
  int64_t type_size;   // bytes per block
  bool decoded;        // DequantizeGgmlBlocks decodes it
};

// The type of id `id`, or nullptr for an id ggml does not define.
const GgmlTypeInfo* FindGgmlType(uint32_t id);

// out[b * block_size + i] = element i of block b, for b < num_blocks, from src (num_blocks * type_size
// bytes). UNIMPLEMENTED naming the type for a type not decoded; INVALID_ARGUMENT for an unknown id.
absl::Status DequantizeGgmlBlocks(uint32_t type, const uint8_t* src, int64_t num_blocks, float* out);

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_GGUF_QUANTS_H_

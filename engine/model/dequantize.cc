// LinearWeight::DequantizeRows: the CPU decode of every stored weight format (DESIGN.md §6), bit for
// bit compressed-tensors' decompression. Also TensorToFloat and StoredBytes.
//
// Per format, for output row o and input column k:
//   dense            W = fp32(weight[o,k])
//   pack-quantized   q = u - 2^(b-1) (u: b-bit field k of row o), zp likewise from the zero-point
//                    tensor packed along `out` (0 when symmetric); g = g_idx[k] or k / group_size;
//                    W = (q - zp) * scale[o,g]
//   naive/int        same with q = int8 weight[o,k] and an unpacked int8/int32 zero point
//   float-quantized  W = fp32(w_fp8[o,k]) * scale[...]
//   nvfp4            s = fp32(scale_fp8[o,k/16]) / global_scale (fp32); W = round_bf16(e2m1(q) * s)
//   mxfp4            W = e2m1(q) * 2^(scale_u8[o,k/32] - 127)  (exact; E8M0 scales)
//
// For the first three the product is EXACT in fp32: |q - zp| <= 255 (8 significant bits) or an FP8 value
// (4 bits) times a bf16/fp16/fp32 scale fits in 24 bits when the scale is bf16 (8) or fp16 (11); an fp32
// scale makes it fp32's own product, as torch computes it with fp32 parameters. So the fp32 value is what
// compressed-tensors yields when the model is loaded in float32 (its fixtures' protocol), and rounding it
// to bf16/fp16 (RNE) yields exactly what it computes in that dtype ((q - zp).to(dtype) * scale). NVFP4 is
// different: compressed-tensors unpacks FP4 values to bf16 and casts the product back to bf16 whatever
// the model dtype, so the bf16 rounding is part of its result.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/base/dtype.h"
#include "engine/base/status_macros.h"
#include "engine/model/gguf_quants.h"
#include "engine/model/raw_read.h"
#include "engine/model/weights.h"

namespace scored {
namespace {

using raw_read::Load;
using raw_read::LoadPackedField;

// Element i of an F32/F16/BF16 tensor, widened to fp32 (exact).
inline float FloatAt(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::kF32:
      return Load<float>(t.data, i);
    case DType::kF16:
      return Fp16ToFloat(Load<uint16_t>(t.data, i));
    case DType::kBF16:
      return Bf16ToFloat(Load<uint16_t>(t.data, i));
    default:
      return NAN;
  }
}

// Signed integer element i of an I8/I32 tensor.
inline int32_t IntAt(const TensorView& t, int64_t i) {
  return t.dtype == DType::kI8 ? static_cast<int32_t>(Load<int8_t>(t.data, i)) : Load<int32_t>(t.data, i);
}

int64_t NumGroups(const LinearWeight& w) {
  return w.weight_scale.shape.size() == 2 ? w.weight_scale.shape[1] : 1;
}

// Index of the scale (and zero point) of element (o, k) for tensor/channel/group strategies.
inline int64_t GroupOf(const LinearWeight& w, int64_t k) {
  if (w.strategy != QuantStrategy::kGroup) return 0;
  if (w.weight_g_idx.present()) return Load<int32_t>(w.weight_g_idx.data, k);
  return k / w.group_size;
}

inline int64_t ScaleIndex(const LinearWeight& w, int64_t o, int64_t g, int64_t num_groups) {
  switch (w.strategy) {
    case QuantStrategy::kTensor:
      return 0;
    case QuantStrategy::kChannel:
      return o;
    default:
      return o * num_groups + g;
  }
}

void DecodePacked(const LinearWeight& w, int64_t o, float* out) {
  const int b = w.num_bits;
  const int32_t offset = 1 << (b - 1);
  const int64_t words_per_row = w.weight_packed.shape[1];
  const uint8_t* row = w.weight_packed.data + o * words_per_row * 4;
  const int64_t num_groups = NumGroups(w);
  for (int64_t k = 0; k < w.in_features; ++k) {
    const int32_t q = static_cast<int32_t>(LoadPackedField(row, k * b, b)) - offset;
    const int64_t g = GroupOf(w, k);
    int32_t zp = 0;
    if (!w.symmetric) {
      // Column g of the [ceil(out*b/32), num_groups] zero-point tensor is a packed word sequence.
      const int64_t bit = o * b;
      const int64_t word = bit >> 5;
      const int shift = static_cast<int>(bit & 31);
      uint64_t v = Load<uint32_t>(w.weight_zero_point.data, word * num_groups + g);
      if (shift + b > 32) {
        v |= static_cast<uint64_t>(Load<uint32_t>(w.weight_zero_point.data, (word + 1) * num_groups + g))
             << 32;
      }
      zp = static_cast<int32_t>((v >> shift) & ((uint64_t{1} << b) - 1)) - offset;
    }
    const float scale = FloatAt(w.weight_scale, ScaleIndex(w, o, g, num_groups));
    out[k] = static_cast<float>(q - zp) * scale;
  }
}

void DecodeNaive(const LinearWeight& w, int64_t o, float* out) {
  const int64_t num_groups = NumGroups(w);
  for (int64_t k = 0; k < w.in_features; ++k) {
    const int32_t q = Load<int8_t>(w.weight.data, o * w.in_features + k);
    const int64_t g = GroupOf(w, k);
    const int64_t si = ScaleIndex(w, o, g, num_groups);
    const int32_t zp = w.weight_zero_point.present() ? IntAt(w.weight_zero_point, si) : 0;
    out[k] = static_cast<float>(q - zp) * FloatAt(w.weight_scale, si);
  }
}

void DecodeNvfp4(const LinearWeight& w, int64_t o, float* out) {
  const float global_scale = Load<float>(w.weight_global_scale.data, 0);
  const int64_t bytes_per_row = w.in_features / 2;
  const int64_t scales_per_row = w.weight_scale.shape[1];
  for (int64_t k = 0; k < w.in_features; ++k) {
    const uint8_t byte = w.weight_packed.data[o * bytes_per_row + k / 2];
    const uint8_t nibble = (k & 1) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0xf);
    const float s = Fp8E4M3ToFloat(w.weight_scale.data[o * scales_per_row + k / 16]) / global_scale;
    out[k] = RoundToBf16(E2M1ToFloat(nibble) * s);
  }
}

// E8M0 exponent byte e -> 2^(e - 127), as compressed-tensors' decompress_mx_scale (bf16, exact: bf16
// has fp32's exponent range): 0 gives the subnormal 2^-127, 255 gives 2^128 = infinity (rejected at load).
inline float E8M0ToFloat(uint8_t e) {
  const uint32_t bits = e == 0 ? 0x00400000u : static_cast<uint32_t>(e) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// MXFP4: E2M1 (nvfp4's nibble order) times a power of two: the product is exact in fp32 and in bf16
// (2 significant bits; the smallest, 0.5 * 2^-127, is a bf16 subnormal), so it equals the library's bf16
// result widened.
void DecodeMxfp4(const LinearWeight& w, int64_t o, float* out) {
  const int64_t bytes_per_row = w.in_features / 2;
  const int64_t scales_per_row = w.weight_scale.shape[1];
  for (int64_t k = 0; k < w.in_features; ++k) {
    const uint8_t byte = w.weight_packed.data[o * bytes_per_row + k / 2];
    const uint8_t nibble = (k & 1) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0xf);
    out[k] = E2M1ToFloat(nibble) * E8M0ToFloat(w.weight_scale.data[o * scales_per_row + k / 32]);
  }
}

void DecodeFp8(const LinearWeight& w, int64_t o, float* out) {
  const int64_t col_blocks = w.strategy == QuantStrategy::kBlock ? w.weight_scale.shape[1] : 0;
  for (int64_t k = 0; k < w.in_features; ++k) {
    const float v = Fp8E4M3ToFloat(w.weight.data[o * w.in_features + k]);
    int64_t si = 0;
    if (w.strategy == QuantStrategy::kChannel) si = o;
    if (w.strategy == QuantStrategy::kBlock) si = (o / w.block_rows) * col_blocks + k / w.block_cols;
    out[k] = v * FloatAt(w.weight_scale, si);
  }
}

}  // namespace

absl::Status LinearWeight::DequantizeRows(int64_t row_begin, int64_t row_end, float* out) const {
  if (row_begin < 0 || row_begin > row_end || row_end > out_features) {
    return absl::OutOfRangeError(
        absl::StrCat(module, ": rows [", row_begin, ", ", row_end, ") outside [0, ", out_features, ")"));
  }
  if (out == nullptr && row_end > row_begin) {
    return absl::InvalidArgumentError(absl::StrCat(module, ": null output"));
  }
  for (int64_t o = row_begin; o < row_end; ++o) {
    float* row = out + (o - row_begin) * in_features;  // [in_features]
    switch (format) {
      case WeightFormat::kDense:
        for (int64_t k = 0; k < in_features; ++k) row[k] = FloatAt(weight, o * in_features + k);
        break;
      case WeightFormat::kPackQuantized:
        DecodePacked(*this, o, row);
        break;
      case WeightFormat::kNaiveQuantized:
        DecodeNaive(*this, o, row);
        break;
      case WeightFormat::kNvfp4PackQuantized:
        DecodeNvfp4(*this, o, row);
        break;
      case WeightFormat::kFloatQuantized:
        DecodeFp8(*this, o, row);
        break;
      case WeightFormat::kMxfp4PackQuantized:
        DecodeMxfp4(*this, o, row);
        break;
      case WeightFormat::kGgmlBlocks: {
        const GgmlTypeInfo* t = FindGgmlType(ggml_type);
        if (t == nullptr)
          return absl::InvalidArgumentError(absl::StrCat(module, ": unknown ggml type ", ggml_type));
        const int64_t row_bytes = in_features / t->block_size * t->type_size;
        SCORED_RETURN_IF_ERROR(DequantizeGgmlBlocks(ggml_type, weight_packed.data + o * row_bytes,
                                                    in_features / t->block_size, row));
        break;
      }
    }
  }
  return absl::OkStatus();
}

int64_t LinearWeight::StoredBytes() const {
  return weight.nbytes + weight_packed.nbytes + weight_scale.nbytes + weight_zero_point.nbytes +
         weight_g_idx.nbytes + weight_global_scale.nbytes + input_global_scale.nbytes;
}

absl::Status TensorToFloat(const TensorView& t, float* out, int64_t out_size) {
  if (t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.file, ": tensor '", t.name, "' has dtype ", DTypeName(t.dtype), ", not F32/F16/BF16"));
  }
  const int64_t n = t.NumElements();
  if (out_size != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t.name, "' has ", n, " elements, output holds ", out_size));
  }
  for (int64_t i = 0; i < n; ++i) out[i] = FloatAt(t, i);
  return absl::OkStatus();
}

}  // namespace scored

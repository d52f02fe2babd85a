// Dequantization of one linear layer's stored weight into a dense compute-dtype matrix (DESIGN.md §6).
//
// out[(o - row_begin) * in_features + k] = OutT(W[o, k]) for o in [row_begin, row_end), where W[o, k] is
// exactly the fp32 value LinearWeight::DequantizeRows (engine/model/weights.h) gives and OutT rounds it to
// nearest even (bf16_t) or keeps it (float):
//   kDense            W = widen(weight[o, k])                                   (F32 / F16 / BF16)
//   kPackQuantized    u = bits [k*b, k*b + b) of row o of weight_packed (int32 words, LSB first; b in 2..8);
//                     u_zp = 2^(b-1) (symmetric) or field o of column g of weight_zero_point
//                     [ceil(out*b/32), groups], packed along `out` the same way (asymmetric);
//                     W = float(u - u_zp) * scale[o, g]     (exact in fp32: <= 8 x 11 significant bits)
//   kNvfp4PackQuantized  e = nibble k of weight_packed[o, k / 2] (even k low nibble), E2M1;
//                     W = round_bf16(E2M1(e) * (fp32(scale_e4m3[o, k / 16]) / global_scale))  (fp32
//                     math; compressed-tensors decodes FP4 in bf16, so even fp32 output holds bf16 values)
//   kMxfp4PackQuantized  e = nibble k of weight_packed[o, k / 2] as nvfp4; W = E2M1(e) * 2^(u - 127) with
//                     u = weight_scale U8 [out, in / 32] at (o, k / 32) (E8M0; exact in fp32 and bf16)
//   kFloatQuantized   W = fp32(weight_e4m3[o, k]) * scale[...]   scale tensor [1], channel [out, 1] or
//                     block [ceil(out/br), ceil(in/bc)] at (o / br, k / bc)
//   kNaiveQuantized   W = float(q - zp) * scale[o, g], q = weight int8, zp (asymmetric only) an unpacked
//                     I8/I32 tensor indexed like the scale, else 0
// g = k / group_size (strategy group), g_idx[k] (actorder group), 0 (channel; tensor reads scale[0]).
// Scales are widened exactly from F32/F16/BF16. Rounding the exact product once to bf16 is what
// compressed-tensors' decompression in bf16 yields (see engine/model/dequantize.cc).
// Not in place; out [row_end - row_begin, in_features] contiguous. dtypes: OutT in {bf16_t, float}.
// Errors: INVALID_ARGUMENT for an inconsistent DequantParams (dtypes, shapes, bits, missing tensors) or a
// bad row range; INTERNAL for a launch failure.
#ifndef SCORED_ENGINE_KERNELS_DEQUANT_H_
#define SCORED_ENGINE_KERNELS_DEQUANT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/base/stored_weight.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

// Device view of one linear layer's stored tensors (bytes exactly as in the checkpoint) plus its format.
// Build it with MakeDequantParams; the pointers must outlive every Dequantize call that uses it.
struct DequantParams {
  WeightFormat format = WeightFormat::kDense;
  QuantStrategy strategy = QuantStrategy::kTensor;
  int64_t out_features = 0;
  int64_t in_features = 0;
  int num_bits = 16;
  bool symmetric = true;
  int64_t group_size = 0;                  // kGroup / nvfp4 (16) / mxfp4 (32)
  int64_t block_rows = 0, block_cols = 0;  // kBlock
  const void* values = nullptr;            // weight (dense / fp8 / int8) or weight_packed (I32 / U8)
  DType values_dtype = DType::kF32;
  int64_t values_cols = 0;      // row length of `values` in elements of values_dtype
  const void* scale = nullptr;  // weight_scale; nullptr for kDense
  DType scale_dtype = DType::kF32;
  int64_t scale_cols = 1;            // row length of the scale (1 for [1] and [out, 1])
  const void* zero_point = nullptr;  // weight_zero_point (asymmetric only)
  DType zero_point_dtype = DType::kI32;
  int64_t zero_point_cols = 1;
  const int32_t* g_idx = nullptr;  // weight_g_idx [in_features] (actorder group only)
  float global_scale = 1.0f;       // nvfp4 weight_global_scale (a divisor), read on the host
};

// Device copies of a StoredLinear's tensors (nullptr where the weight has none). Each must hold exactly
// the bytes of the TensorView of the same name.
struct DequantDevicePointers {
  const void* weight = nullptr;
  const void* weight_packed = nullptr;
  const void* weight_scale = nullptr;
  const void* weight_zero_point = nullptr;
  const void* weight_g_idx = nullptr;
};

// Fills DequantParams from the host description of the stored weight (format, shapes, dtypes; the nvfp4
// global scale and the g_idx are read from their host bytes) and the device pointers. engine/model's
// LinearWeight is a StoredLinear. Validates shapes and dtypes; INVALID_ARGUMENT naming the module and the
// problem otherwise.
absl::StatusOr<DequantParams> MakeDequantParams(const StoredLinear& weight, const DequantDevicePointers& dev);

template <typename OutT>
absl::Status Dequantize(const DequantParams& params, int64_t row_begin, int64_t row_end,
                        OutT* out,  // [row_end - row_begin, in_features]
                        cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_DEQUANT_H_

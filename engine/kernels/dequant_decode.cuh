// The element arithmetic of compressed-tensors weights that more than one kernel decodes (private: included
// by .cu files only): dequant.cu (the expansion into a dense matrix) and grouped_gemm.cu (4-bit weights
// decoded inside the GEMM). One copy, so the grouped GEMM multiplies bitwise the bf16 values Dequantize
// writes.
#ifndef SCORED_ENGINE_KERNELS_DEQUANT_DECODE_CUH_
#define SCORED_ENGINE_KERNELS_DEQUANT_DECODE_CUH_

#include <cstdint>

#include "engine/base/dtype.h"
#include "engine/base/stored_weight.h"

namespace scored::kernels {

// Element i of a scale (or dense) tensor widened exactly to fp32; NaN for a dtype that is not a float.
__device__ __forceinline__ float FloatAt(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(data)[i];
    case DType::kF16:
      return Fp16ToFloat(static_cast<const uint16_t*>(data)[i]);
    case DType::kBF16:
      return Bf16ToFloat(static_cast<const uint16_t*>(data)[i]);
    case DType::kF8E4M3:
      return Fp8E4M3ToFloat(static_cast<const uint8_t*>(data)[i]);
    default:
      return __int_as_float(0x7fc00000);
  }
}

// A pack-quantized integer weight: float(u - zp) * scale, one fp32 product (exact: <= 8 x 11 significant
// bits), for the field u and the zero point zp (2^(b-1) when symmetric) as stored, both in [0, 2^23).
// float(u - zp) is exact from the float bits of 2^23 + u and 2^23 + zp (one add, where an int-to-float
// conversion runs at a quarter of its rate).
__device__ __forceinline__ float PackedIntValue(int32_t u, int32_t zp, float scale) {
  const float difference = __fsub_rn(__uint_as_float(0x4b000000u | static_cast<uint32_t>(u)),
                                     __uint_as_float(0x4b000000u | static_cast<uint32_t>(zp)));
  return __fmul_rn(difference, scale);
}

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_DEQUANT_DECODE_CUH_

// Types shared by every kernel header. Plain C++: includable from .cc files that never see nvcc.
//
// Pointer convention (see README.md): device arrays are passed as typed pointers.
//   bf16 activations/weights  -> bf16_t*  (2 bytes, the raw bit pattern; layout-identical to __nv_bfloat16)
//   fp32                      -> float*
//   FP8 E4M3FN                -> uint8_t* (raw bit pattern)
//   ids, positions, offsets   -> int32_t*
// Ops that work on both bf16 and fp32 activations are function templates declared in their header and
// explicitly instantiated in the .cu for T in {bf16_t, float} only (another T fails to link).
// The stream is a cudaStream_t; cudaStream_t{nullptr} is the legacy default stream.
#ifndef SCORED_ENGINE_KERNELS_KERNEL_TYPES_H_
#define SCORED_ENGINE_KERNELS_KERNEL_TYPES_H_

#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace scored::kernels {

// One bfloat16 value as its bit pattern (sign, 8 exponent bits, 7 mantissa bits). Host code converts with
// engine/base/dtype.h (Bf16ToFloat / FloatToBf16).
struct bf16_t {
  uint16_t bits;
};
static_assert(sizeof(bf16_t) == 2, "bf16_t must be 2 bytes");

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_KERNEL_TYPES_H_

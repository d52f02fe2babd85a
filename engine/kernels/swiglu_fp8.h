// Fused W8A8 MLP middle: FP8 GEMM scales + SwiGLU + per-token FP8 quantization of the down_proj input, in
// one pass. For W8A8 (compressed-tensors FP8 dynamic: per-token FP8 E4M3 activations) it replaces
//   ApplyFp8Scales<bf16_t>(gate_up, x_scale, w_scale)   (fp8_scale.h; skipped when the GEMM scaled already)
//   SwiGlu<bf16_t>(gate_up, gate_up + inter, 2 * inter)  (swiglu.h)
//   QuantizeFp8PerToken<bf16_t>(m, inter)                (fp8_quant.h)
// with bitwise the same q and scale, and without the bf16 intermediates in memory.
//
// Per token t, column j < inter:
//   x_scale and w_scale both non-null: g = bf16(float(gate_up[t, j]) * (x_scale[t] * w_scale[j])) and
//     u = bf16(float(gate_up[t, inter + j]) * (x_scale[t] * w_scale[inter + j])), IEEE fp32 products,
//     round-to-nearest-even (ApplyFp8Scales<bf16_t>); both null: g, u = gate_up's values as they are.
//   m[j] = bf16(SwiGlu<bf16_t>'s fp32 value of (g, u)): the same fast-math arithmetic
//     (swiglu_math.cuh), so m is bitwise SwiGlu<bf16_t>'s output.
//   amax = max_j |m[j]|, scale[t] = fp32(amax / 448) (IEEE division),
//   q[t, j] = FloatToFp8E4M3(m[j] / scale[t]) (IEEE division; RNE, saturating to +-448; engine/base/dtype.h),
//   a row with amax == 0 gets scale 0 and q = 0 (QuantizeFp8PerToken<bf16_t>).
// Numerics vs the exact math (ref::SwiGlu of the scaled inputs): m carries bf16's rounding (2^-8
// relative) plus the fast-math error (swiglu.h); the dequantized q * scale is within half an FP8 step of m
// (2^-4 relative for normal codes, scale * 2^-10 absolute in the subnormal range).
// Rows are independent (one block per row, amax is an exact max): a token's result does not depend on the
// other rows (batch-invariant).
//
// Shapes: gate_up [num_tokens, 2 * inter] contiguous (gate in columns [0, inter), up in [inter, 2 inter)),
// x_scale [num_tokens], w_scale [2 * inter], q [num_tokens, inter] contiguous, scale [num_tokens].
// Limits: inter a multiple of 8 and at most kSwiGluQuantFp8MaxInter (32768); gate_up and w_scale 16-byte
// aligned, q 8-byte aligned (cudaMalloc'd buffers are). Anything else is INVALID_ARGUMENT, and the caller
// runs the unfused sequence above.
// dtypes: gate_up bf16, x_scale / w_scale / scale fp32, q FP8 E4M3FN bit patterns.
// Errors: INVALID_ARGUMENT (shapes, alignment, null pointers, exactly one of x_scale / w_scale null),
// INTERNAL (launch). Enqueued on `stream`; no synchronization, no allocation.
//
// Time (memory-bound; bytes per token: 2 * inter * 2 in, inter + 4 out): Llama-3-8B at 32768 tokens
// (inter 14336): 2.35 GB -> predicted ~0.59 ms on an H200 (4.0 TB/s). The unfused sequence moves
// 2 * inter * 2 * 2 (scales, in place) + 3 * inter * 2 (SwiGLU) + inter * 2 + inter + 4 (quantize) bytes per
// token: 7.99 GB -> ~2.0 ms at the same rate (SwiGLU alone measured 1.19 ms per call before this op).
#ifndef SCORED_ENGINE_KERNELS_SWIGLU_FP8_H_
#define SCORED_ENGINE_KERNELS_SWIGLU_FP8_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

// The largest intermediate size SwiGluQuantFp8 takes (the row lives in registers of one block).
constexpr int64_t kSwiGluQuantFp8MaxInter = 32768;

absl::Status SwiGluQuantFp8(const bf16_t* gate_up,  // [num_tokens, 2 * inter]
                            int64_t num_tokens, int64_t inter,
                            const float* x_scale,  // [num_tokens] or nullptr
                            const float* w_scale,  // [2 * inter] or nullptr
                            uint8_t* q,            // [num_tokens, inter] FP8 E4M3FN bits
                            float* scale,          // [num_tokens]
                            cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_SWIGLU_FP8_H_

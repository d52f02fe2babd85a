// RMSNorm fused with W8A8 dynamic per-token FP8 E4M3 quantization: the input of every FP8 GEMM that follows
// a norm (qkv, gate_up) in one pass over the fp32 residual stream.
//
//   normed[t, i] = bf16(x[t, i] * rsqrt(mean_i(x[t, :]^2) + eps) * weight[i])
//   scale[t]     = fp32(amax_i |normed[t, i]| / 448)                       (IEEE division)
//   q[t, i]      = fp8_e4m3(normed[t, i] / scale[t])   (RNE, saturating to +-448; dtype.h FloatToFp8E4M3)
//   a row whose amax is 0 gets scale 0 and q = 0.
// Numerics: normed is bitwise what RmsNorm<float, bf16_t> (rms_norm.h, vector path) writes for the same
// arguments: the same code (rms_norm_row.cuh), so the same per-thread chunk order, the same BlockSum
// tree, rsqrtf, and one RNE rounding to bf16. (q, scale) is then bitwise what QuantizeFp8PerToken<bf16_t>
// (fp8_quant.h) gives on that bf16 row. Results do not depend on num_tokens or on a row's place in the
// batch. Dequantized, fp32(q) * scale is within one FP8 step of the exact RMSNorm (bf16 rounding of
// 2^-9 relative plus FP8 rounding of at most half a step).
//
// Shapes: x [num_tokens, x_stride] fp32 (elements, x_stride >= hidden_size); weight [hidden_size] fp32;
// out [num_tokens, out_stride] bf16 (optional: nullptr skips it, out_stride then unused); q [num_tokens,
// hidden_size] contiguous FP8 E4M3FN bit patterns; scale [num_tokens] fp32.
// Supported: hidden_size a multiple of 8 in [8, 16384] (8 * 8 * 256, RmsNorm's vector path), x_stride and
// out_stride multiples of 8, x / weight / out 16-byte aligned, q 8-byte aligned. The engine's shapes
// (hidden 256..16384, cudaMalloc'd buffers) qualify; anything else is INVALID_ARGUMENT and the caller runs
// RmsNorm<float, bf16_t> + QuantizeFp8PerToken<bf16_t> instead (same results, two passes).
// Not in place: out, q and scale must not overlap x, weight or each other.
// Errors: INVALID_ARGUMENT (shapes, strides, alignment, null pointers), INTERNAL (launch).
// Thread-safety: stream-ordered like every kernel; no state.
//
// Predicted time (memory-bound; per token, weight reads hit L2): reads 4 * hidden_size bytes, writes
// hidden_size (q) + 4 (scale) [+ 2 * hidden_size with out]: 5 * H + 4 bytes (7 * H + 4 with out) against
// 9 * H + 4 for today's two passes (RmsNorm: 4H in, 2H out; QuantizeFp8PerToken: 2H in, H + 4 out) and one
// launch instead of two. 16384 tokens x 4096: 336 MB (470 MB with out) vs 604 MB, i.e. ~81 us (113 us)
// vs ~146 us at the 4.15 TB/s copy rate of an H200 (GPU.md); the fused op should take 0.56x (0.78x) of
// the two passes' time. That holds while it stays memory-bound: the compute side is the quantizer's
// per-element IEEE division and software FP8 rounding (kept for bitwise equality; the same work the
// second pass does today). kernels_test's RmsNormFp8Test.ThroughputLlama8B reports the measured times.
#ifndef SCORED_ENGINE_KERNELS_RMS_NORM_FP8_H_
#define SCORED_ENGINE_KERNELS_RMS_NORM_FP8_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

absl::Status RmsNormQuantFp8(const float* x,  // [num_tokens, x_stride] fp32 residual stream
                             int64_t x_stride,
                             const float* weight,  // [hidden_size]
                             int64_t num_tokens, int64_t hidden_size, float eps,
                             bf16_t* out,  // [num_tokens, out_stride] or nullptr
                             int64_t out_stride,
                             uint8_t* q,    // [num_tokens, hidden_size] FP8 E4M3FN bits
                             float* scale,  // [num_tokens]
                             cudaStream_t stream);

// Whether RmsNormQuantFp8 takes rows of hidden_size elements (the stride and alignment conditions above
// aside): lets the caller pick the fused or the two-pass sequence once, at load.
bool RmsNormQuantFp8Supports(int64_t hidden_size);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_RMS_NORM_FP8_H_

// INT8 W8A8 on int8 tensor cores (Hopper): y[m, n] = (x_scale[i] * w_scale[j]) * sum_k x[i, k] * w[j, k],
// with x int8 [m, k] (a token's input quantized per token, kernels/int8_quant.h QuantizeInt8PerToken) and w
// int8 [n, k] (a checkpoint's channel-wise symmetric int8 weight as stored). The integer products are summed
// exactly in int32 (|sum| <= 128 * 128 * k < 2^31 for k < 131072), so the only roundings are the fp32 scaling
// of that exact sum (x_scale * (w_scale * acc), in that order, round to nearest) and the output's: that is
// compressed-tensors' fake-quantized matmul up to where fp32 sums round. A row's result depends on that row
// alone (no split-K, no batch-dependent reduction order): batch-invariant and deterministic by construction.
//
// The kernel is a CUTLASS 3 SM90 warp-specialized TMA GEMM with the two scale vectors broadcast in its
// epilogue (built for sm_90a only; Int8GemmSupported says whether this build and device can run it).
#ifndef SCORED_ENGINE_KERNELS_INT8_GEMM_H_
#define SCORED_ENGINE_KERNELS_INT8_GEMM_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace scored::kernels {

enum class Int8GemmOutput {
  kBf16,            // y bf16 [m, n]: the scaled fp32 value rounded to nearest even
  kFp32,            // y fp32 [m, n]
  kFp32Accumulate,  // y fp32 [m, n] += the scaled value (one fp32 add per element, after the scaling)
};

// True when this build holds the kernel for `device`'s architecture (compute capability 9.0, built with
// 90a) and the device is that architecture.
bool Int8GemmSupported(int device);

// The shapes the kernel takes: k and n multiples of 16 (16-byte TMA rows of int8), m >= 1, k < 131072.
absl::Status CheckInt8GemmShape(int64_t m, int64_t n, int64_t k);

// Enqueues y = the scaled int8 GEMM on `stream`. Pointers are device memory: x [m, k] and w [n, k] row-major
// int8 with 16-byte-aligned rows, x_scale [m] and w_scale [n] fp32, y [m, n] row-major (bf16 or fp32 per
// `output`). INVALID_ARGUMENT for a shape CheckInt8GemmShape refuses, FAILED_PRECONDITION where
// !Int8GemmSupported, INTERNAL for a launch error. Thread-safe (no state besides CUDA's).
absl::Status Int8ScaledGemm(const int8_t* x, const float* x_scale, const int8_t* w, const float* w_scale,
                            void* y, int64_t m, int64_t n, int64_t k, Int8GemmOutput output,
                            cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_INT8_GEMM_H_

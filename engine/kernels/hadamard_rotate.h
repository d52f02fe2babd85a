// transform_config's online Hadamard rotations on the GPU (the twin of ref::RotateRows, engine/reference/
// ops.h), in O(n log n + n K) per block instead of the dense O(n^2) product, from the matrix's factors
// (engine/model/hadamard_factors.h: T = D . (A (x) H_L)^T, n = K L):
//   forward: y = (A (x) H_L) (signs . x) / sqrt(n)          = (x . T) / sqrt(n)
//   inverse: y = signs . ((A^T (x) H_L) x) / sqrt(n)        = (x . T^T) / sqrt(n)
// per block of n elements of each row, in place: the block is widened to double in shared memory, a
// Walsh-Hadamard transform runs over every L-long chunk (log2 L butterfly stages), the K x K core combines
// the chunks, and the result is scaled by 1 / sqrt(n) in double and rounded once to T, as compressed-tensors
// 0.19 does at precision float64 (it divides by sqrt(n): the same for n a power of 4, within an ulp of double
// otherwise; and the order of the exact-in-double sums differs from the oracle's dense product: all are
// within a few ulps of double of the exact value, so after the rounding to fp32 or bf16 they agree except
// where that value sits within ~1e-15 of a rounding boundary).
// Cost: n doubles (and the K^2 / 8 core bytes) of shared memory per block (n <= MaxHadamardRotationSize),
// log2(L) + K additions per element; memory-bound for K = 1 (every power-of-two size compressed-tensors
// builds), FP64-bound for large cores (Llama-3-8B's 14336 = 224 x 64); tests/bench/RESULTS.md has numbers.
// Shapes: x [rows, ld] (elements); the rotated columns are [0, width), width % n == 0. T in {bf16_t, float}.
// Errors: INVALID_ARGUMENT (shapes, a null table, K over kMaxHadamardCore, n over the device's limit),
// INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_HADAMARD_ROTATE_H_
#define SCORED_ENGINE_KERNELS_HADAMARD_ROTATE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

struct HadamardRotation {
  int32_t size = 0;               // n = chunk * core_size
  int32_t chunk = 0;              // L, a power of two
  int32_t core_size = 0;          // K, <= kMaxHadamardCore
  const int8_t* signs = nullptr;  // device [n], +-1
  // device [K, ceil(K / 8)] bytes, the core oriented for this direction (PackHadamardCore): bit t of byte
  // [c][q] is 1 where chunk c enters output chunk 8 q + t negated.
  const uint8_t* core_bits = nullptr;
  bool inverse = false;
};

inline constexpr int32_t kMaxHadamardCore = 256;  // compressed-tensors' largest table

// The core bits of HadamardRotation for the [K, K] row-major +-1 core A (hadamard_factors.h): output chunk j
// takes chunk c times A[j][c] (forward) or A[c][j] (inverse).
std::vector<uint8_t> PackHadamardCore(const std::vector<int8_t>& core, int32_t k, bool inverse);

// The largest n `device` can rotate (its opt-in shared memory per block / 8).
int64_t MaxHadamardRotationSize(int device);

template <typename T>
absl::Status HadamardRotate(T* x,  // [rows, ld], columns [0, width) rotated in place
                            int64_t ld, int64_t rows, int64_t width, const HadamardRotation& rotation,
                            cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_HADAMARD_ROTATE_H_

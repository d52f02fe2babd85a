// The structure of a stored transform_config rotation matrix (transform_config.h), for engines that apply it
// in O(n log n) instead of the O(n^2) dense product.
//
// compressed-tensors builds a hadamard / random-hadamard matrix of size n as T = D . (A (x) H_L)^T: D a
// diagonal of +-1 signs (all +1 for "hadamard"), H_L Sylvester's Hadamard matrix of order L (a power of two),
// A a known +-1 matrix of order K = n / L from its table (utils/hadamard.py _matmul_hadU: butterflies over
// the low log2(L) index bits, then A over the high ones). So, writing an index i as (i_hi, i_lo) =
// (i / L, i % L):
//   T[i][j] = signs[i] * core[j_hi][i_hi] * H_L[j_lo][i_lo],   H_L[a][b] = (-1)^popcount(a & b)
//   (x . T)_j   = sum_i (signs[i] x_i) core[j_hi][i_hi] H_L[j_lo][i_lo]        (the forward rotation)
//   (x . T^T)_j = signs[j] sum_i x_i core[i_hi][j_hi] H_L[i_lo][j_lo]          (inverse)
// i.e. a Walsh-Hadamard transform of every L-long chunk, then the K x K core across the chunks.
//
// FactorHadamard finds the largest L for which a stored matrix has exactly this form (checking every entry,
// O(n^2) per candidate; a candidate fails at its first mismatch), so the core is as small as the matrix
// allows: K = 1 for the power-of-two sizes compressed-tensors builds from its Sylvester tables, K = 28 ...
// 256 otherwise (14336 = 224 x 64 on Llama-3-8B's MLP). The signs and core absorb each other's sign freedom:
// signs[i_hi * L] = 1 for every chunk.
//
// Thread-safety: pure function.
#ifndef SCORED_ENGINE_MODEL_HADAMARD_FACTORS_H_
#define SCORED_ENGINE_MODEL_HADAMARD_FACTORS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/base/stored_weight.h"

namespace scored {

struct HadamardFactors {
  int64_t size = 0;           // n = chunk * core_size
  int64_t chunk = 0;          // L, a power of two
  int64_t core_size = 0;      // K
  std::vector<int8_t> signs;  // [n], +-1
  std::vector<int8_t> core;   // [K, K] row-major, +-1
  // T[i][j] as the factors give it (+-1).
  int Entry(int64_t i, int64_t j) const;
};

// Factors the square F64 / F32 matrix `matrix`. INVALID_ARGUMENT naming it when it is not square or has an
// entry other than +-1. Every +-1 matrix factors (at worst with L = 1: core = T^T, K = n); the engines
// decide whether a core that large is worth applying (CUDA: hadamard_rotate.h).
absl::StatusOr<HadamardFactors> FactorHadamard(const TensorView& matrix);

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_HADAMARD_FACTORS_H_

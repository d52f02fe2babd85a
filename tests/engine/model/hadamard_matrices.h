// Test matrices of compressed-tensors' Hadamard form (engine/model/hadamard_factors.h), shared by the
// factorization's tests and the GPU rotation kernel's.
#ifndef SCORED_TESTS_ENGINE_MODEL_HADAMARD_MATRICES_H_
#define SCORED_TESTS_ENGINE_MODEL_HADAMARD_MATRICES_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/base/stored_weight.h"

namespace scored::testing_hadamard {

// Sylvester's H[a][b] = (-1)^popcount(a & b).
inline int Sylvester(int64_t a, int64_t b) { return (__builtin_popcountll(a & b) & 1) ? -1 : 1; }

// [n, n] row-major, n = core_size * chunk: T[i][j] = signs[i] core[j_hi][i_hi] H_chunk[j_lo][i_lo] with
// random +-1 signs and core (seeded).
inline std::vector<double> Structured(int64_t core_size, int64_t chunk, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t n = core_size * chunk;
  std::vector<int> signs(n), core(core_size * core_size);
  for (int& s : signs) s = (rng() & 1) ? 1 : -1;
  for (int& c : core) c = (rng() & 1) ? 1 : -1;
  std::vector<double> t(n * n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      t[i * n + j] = signs[i] * core[(j / chunk) * core_size + i / chunk] * Sylvester(j % chunk, i % chunk);
    }
  }
  return t;
}

// An F64 [n, n] view of `t` (which must outlive it), named `name`.
inline TensorView F64View(const std::vector<double>& t, int64_t n, const std::string& name = "test.matrix") {
  TensorView v;
  v.name = name;
  v.dtype = DType::kF64;
  v.shape = {n, n};
  v.data = reinterpret_cast<const uint8_t*>(t.data());
  v.nbytes = static_cast<int64_t>(t.size() * sizeof(double));
  return v;
}

}  // namespace scored::testing_hadamard

#endif  // SCORED_TESTS_ENGINE_MODEL_HADAMARD_MATRICES_H_

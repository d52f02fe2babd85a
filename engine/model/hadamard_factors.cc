#include "engine/model/hadamard_factors.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/model/raw_read.h"

namespace scored {
namespace {

// Sylvester's H_L[a][b] for a, b < L.
int Sylvester(int64_t a, int64_t b) {
  return (__builtin_popcountll(static_cast<unsigned long long>(a & b)) & 1) ? -1 : 1;
}

// The matrix's entries as +-1, row-major; INVALID_ARGUMENT at the first other value.
absl::StatusOr<std::vector<int8_t>> SignsOf(const TensorView& matrix, int64_t n) {
  std::vector<int8_t> t(static_cast<size_t>(n * n));
  for (int64_t e = 0; e < n * n; ++e) {
    const double v = matrix.dtype == DType::kF64 ? raw_read::Load<double>(matrix.data, e)
                                                 : static_cast<double>(raw_read::Load<float>(matrix.data, e));
    if (v != 1.0 && v != -1.0) {
      return absl::InvalidArgumentError(absl::StrCat(matrix.name, ": entry [", e / n, "][", e % n, "] is ", v,
                                                     "; a Hadamard rotation's stored entries are +-1"));
    }
    t[e] = v > 0 ? 1 : -1;
  }
  return t;
}

// The factors with chunk L when T (+-1, [n, n]) has that form, else nothing.
bool TryChunk(const std::vector<int8_t>& t, int64_t n, int64_t chunk, HadamardFactors* out) {
  const int64_t k = n / chunk;
  HadamardFactors f;
  f.size = n;
  f.chunk = chunk;
  f.core_size = k;
  f.core.resize(static_cast<size_t>(k * k));
  f.signs.resize(static_cast<size_t>(n));
  // signs[i_hi * L] = 1 and H_L's first row and column are +1: core[j_hi][i_hi] = T[i_hi L][j_hi L], and
  // column 0 gives signs[i] = T[i][0] * core[0][i_hi].
  for (int64_t a = 0; a < k; ++a) {
    for (int64_t b = 0; b < k; ++b) f.core[b * k + a] = t[(a * chunk) * n + b * chunk];
  }
  for (int64_t i = 0; i < n; ++i) f.signs[i] = static_cast<int8_t>(t[i * n] * f.core[i / chunk]);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t i_hi = i / chunk, i_lo = i % chunk;
    const int8_t* row = t.data() + i * n;
    for (int64_t j = 0; j < n; ++j) {
      const int want = f.signs[i] * f.core[(j / chunk) * k + i_hi] * Sylvester(j % chunk, i_lo);
      if (row[j] != want) return false;
    }
  }
  *out = std::move(f);
  return true;
}

}  // namespace

int HadamardFactors::Entry(int64_t i, int64_t j) const {
  return signs[i] * core[(j / chunk) * core_size + i / chunk] * Sylvester(j % chunk, i % chunk);
}

absl::StatusOr<HadamardFactors> FactorHadamard(const TensorView& matrix) {
  if (matrix.shape.size() != 2 || matrix.shape[0] != matrix.shape[1] || matrix.shape[0] <= 0 ||
      (matrix.dtype != DType::kF64 && matrix.dtype != DType::kF32)) {
    return absl::InvalidArgumentError(
        absl::StrCat(matrix.name, ": a transform matrix must be a square F64 or F32 tensor"));
  }
  const int64_t n = matrix.shape[0];
  SCORED_ASSIGN_OR_RETURN(const std::vector<int8_t> t, SignsOf(matrix, n));
  // The largest power of two dividing n first: the smallest core.
  int64_t chunk = n & -n;
  HadamardFactors f;
  for (; chunk > 1; chunk /= 2) {
    if (TryChunk(t, n, chunk, &f)) return f;
  }
  TryChunk(t, n, 1, &f);  // always fits: core = T^T
  return f;
}

}  // namespace scored

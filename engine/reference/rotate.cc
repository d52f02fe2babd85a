// Online Hadamard rotations (transform_config), exactly as compressed-tensors 0.19 applies them: the value
// cast to float64, multiplied by the float64 matrix (block-diagonal over blocks of `size` elements), divided
// by sqrt(size) in float64, rounded back to float32 (contract in ops.h).
#include <cmath>
#include <vector>

#include "engine/reference/ops.h"

namespace scored::ref {

void RotateRows(float* x, int64_t rows, int64_t width, const double* t, int64_t size, bool inverse) {
  const double scale = std::sqrt(static_cast<double>(size));
  std::vector<double> in(static_cast<size_t>(size));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t block = 0; block < width; block += size) {
      float* v = x + r * width + block;
      for (int64_t i = 0; i < size; ++i) in[i] = static_cast<double>(v[i]);
      for (int64_t j = 0; j < size; ++j) {
        double sum = 0.0;
        for (int64_t i = 0; i < size; ++i) sum += in[i] * (inverse ? t[j * size + i] : t[i * size + j]);
        v[j] = static_cast<float>(sum / scale);
      }
    }
  }
}

}  // namespace scored::ref

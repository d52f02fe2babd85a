// Logit soft-capping (Gemma 2's final_logit_softcapping), in place on fp32 rows:
//   x[r, j] = fp32(tanh(fp32(x[r, j] / cap))) * cap   for r < rows, j < cols
// the division and product IEEE fp32 (no FMA), the tanh tanhf (within 2 fp32 ulp of the exact value; the
// oracle ref::SoftCap evaluates it in double: the two differ by at most ~2 ulp of cap, 4e-6 at cap 30).
// Element-wise: a row's result does not depend on the others (batch-invariant); under tensor parallelism
// each rank caps its own vocabulary columns.
// Shapes: x [rows, ld] row-major device memory, ld >= cols. cap > 0 and finite.
// Errors: INVALID_ARGUMENT (shapes, cap, null pointer), INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_SOFT_CAP_H_
#define SCORED_ENGINE_KERNELS_SOFT_CAP_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

absl::Status SoftCap(float* x,  // [rows, ld]
                     int64_t rows, int64_t cols, int64_t ld, float cap, cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_SOFT_CAP_H_

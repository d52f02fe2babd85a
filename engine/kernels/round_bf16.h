// x = fp32(bf16_rne(x)) in place: an fp32 matrix rounded to bf16 values. The fp32 mode's reading of quantized
// mixture-of-experts weights, which transformers 5.17 decompresses in their scale dtype (bf16) and the CPU
// oracle rounds the same way (engine/model/weights.h MoeWeights). Errors: INVALID_ARGUMENT, INTERNAL
// (launch).
#ifndef SCORED_ENGINE_KERNELS_ROUND_BF16_H_
#define SCORED_ENGINE_KERNELS_ROUND_BF16_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

absl::Status RoundToBf16InPlace(float* x, int64_t n, cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_ROUND_BF16_H_

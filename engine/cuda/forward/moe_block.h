// The sparse (mixture-of-experts) MLP block of a decoder layer on the forward's context (context.h):
// DeviceMoe; engine/model/config.h has the semantics. One row chunk (tensor parallelism: the rank's slice of
// every expert, shard_plan.h): norm, the router's fp32 logits, the routing, the slots grouped by expert, then
// the experts (as grouped GEMMs where DeviceMoe::grouped is enabled; else one by one in ascending id)
// weighted and summed per token in ascending expert id, the shared expert, and their sum into the residual
// (kernels/moe_combine.h: the oracle's order of fp32 adds), then the rows' sum over ranks. An expert's output
// rows are in the compute dtype (bf16 mode: rounded to bf16 once, as transformers' are; the weighted sum and
// everything after it stay fp32); the shared expert's are fp32 like a dense MLP's. A token's rows are
// computed with the GEMM algorithm pinned for the expert's shape whatever the row count (the grouped kernel:
// one fixed k order per output element), so its result does not depend on the rest of the batch.
#ifndef SCORED_ENGINE_CUDA_FORWARD_MOE_BLOCK_H_
#define SCORED_ENGINE_CUDA_FORWARD_MOE_BLOCK_H_

#include "absl/status/status.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/forward/context.h"

namespace scored::cuda {

// Layer `l` (its weights `layer`, layer.sparse; its plan ctx.plan.layers[l]). INTERNAL with more than one
// row chunk; errors: the kernels', GEMMs' and weight stream's.
template <typename T>
absl::Status MoeBlock(ForwardContext<T>& ctx, const DeviceLayer& layer, int64_t l);

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_FORWARD_MOE_BLOCK_H_

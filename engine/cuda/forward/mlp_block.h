// The dense MLP block of a decoder layer (a gated linear unit) on the forward's context (context.h): chunk
// by chunk the MLP's input norm, gate|up, the GLU (SwiGLU; GeGLU with the tanh GELU for Gemma; or, where
// gate|up and down_proj run real FP8 GEMMs, gate|up's scales, SwiGLU and down_proj's input quantization in
// one kernel), and down_proj joining the residual stream (residual.h) with the chunk's sum over ranks.
#ifndef SCORED_ENGINE_CUDA_FORWARD_MLP_BLOCK_H_
#define SCORED_ENGINE_CUDA_FORWARD_MLP_BLOCK_H_

#include "absl/status/status.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/forward/context.h"

namespace scored::cuda {

// Layer `l` (its weights `layer`, its plan ctx.plan.layers[l]).
template <typename T>
absl::Status MlpBlock(ForwardContext<T>& ctx, const DeviceLayer& layer, int64_t l);

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_FORWARD_MLP_BLOCK_H_

// The attention block of a decoder layer on the forward's context (context.h): chunk by chunk the input
// norm, q|k|v, bias / q-k norm, RoPE, the FP8 KV cache's quantize-dequantize, causal attention over the
// chunk's sequences, and o_proj joining the residual stream (residual.h) with the chunk's sum over ranks.
#ifndef SCORED_ENGINE_CUDA_FORWARD_ATTENTION_BLOCK_H_
#define SCORED_ENGINE_CUDA_FORWARD_ATTENTION_BLOCK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/forward/context.h"
#include "engine/cuda/row_reduce.h"

namespace scored::cuda {

// Layer `l` (its weights `layer`); input_sum: the row-parallel sum the input norm awaits (kNone for the
// first layer). Errors: the kernels' and the weight stream's statuses.
template <typename T>
absl::Status AttentionBlock(ForwardContext<T>& ctx, const DeviceLayer& layer, int64_t l, RowSum input_sum);

// The one cos/sin table that rotates every token of layer `l` (the local one for Gemma's sliding layers),
// or nullptr where longrope picks a table per sequence.
template <typename T>
const float* OneRopeTable(const ForwardContext<T>& ctx, int64_t l);

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_FORWARD_ATTENTION_BLOCK_H_

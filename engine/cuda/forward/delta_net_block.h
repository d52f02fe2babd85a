// The Gated DeltaNet block of a decoder layer (Qwen3.5's linear-attention layers; engine/model/family.h
// LinearAttentionTraits has the computation) on the forward's context (context.h): the input norm, one GEMM
// of the fused input projections (DeviceLayer::qkv: q|k|v, z, b, a rows), the causal conv + SiLU, the q / k
// L2 norm with beta and g, the gated delta rule over each sequence from a zero state, the gated output norm
// with z, and out_proj (DeviceLayer::o) joining the residual stream. One row chunk (the family is not
// tensor-parallel): every op runs over the batch's sequences at once, each sequence independent.
#ifndef SCORED_ENGINE_CUDA_FORWARD_DELTA_NET_BLOCK_H_
#define SCORED_ENGINE_CUDA_FORWARD_DELTA_NET_BLOCK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/forward/context.h"
#include "engine/cuda/row_reduce.h"

namespace scored::cuda {

// Layer `l` (its weights `layer`, layer.delta_net's buffers); input_sum: the row-parallel sum the input norm
// awaits (kNone for the first layer). Errors: the kernels' and the weight stream's statuses; INTERNAL for
// more than one row chunk.
template <typename T>
absl::Status DeltaNetBlock(ForwardContext<T>& ctx, const DeviceLayer& layer, int64_t l, RowSum input_sum);

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_FORWARD_DELTA_NET_BLOCK_H_

// gpt-oss's dense expert tensors and expert biases as ExpertWeights (the MXFP4 blocks: gpt_oss_mxfp4.h).
//
// The checkpoint (transformers 5.17 models/gpt_oss GptOssExperts: its parameters as saved, no conversion
// mapping), per MoE layer `<experts>` = "model.layers.L.mlp.experts", E experts, I = intermediate_size,
// H = hidden_size:
//   <experts>.gate_up_proj       F32/F16/BF16 [E, H, 2I]   x @ gate_up_proj[e]: columns are outputs;
//                                                         gate = columns 0::2, up = columns 1::2
//   <experts>.gate_up_proj_bias  [E, 2I]                  gate bias = 0::2, up bias = 1::2
//   <experts>.down_proj          [E, I, H]                x @ down_proj[e]
//   <experts>.down_proj_bias     [E, H]
// (GptOssExperts.forward: gate_up = x @ gate_up_proj[e] + gate_up_proj_bias[e]; _apply_gate splits it
// [..., ::2] / [..., 1::2]; out = glu @ down_proj[e] + down_proj_bias[e].)
//
// Thread-safety: pure functions over immutable views.
#ifndef SCORED_ENGINE_MODEL_GPT_OSS_EXPERTS_H_
#define SCORED_ENGINE_MODEL_GPT_OSS_EXPERTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/safetensors.h"
#include "engine/model/toolkit_quant.h"  // TranscodedBuffers
#include "engine/model/weights.h"

namespace scored {

// Expert e's gate_proj [I, H] = gate_up_proj[e, :, 0::2]^T, up_proj [I, H] = gate_up_proj[e, :, 1::2]^T and
// down_proj [H, I] = down_proj[e]^T, each a kDense LinearWeight of the stored dtype (a transposed copy,
// exact) named "<experts>.<e>.gate_proj" / ".up_proj" / ".down_proj" (MoeWeights' per-expert module names),
// no bias. The copies are appended to `buffers` (3 per call, each holding every expert), which must outlive
// the weights; nothing is appended when an error is returned. INVALID_ARGUMENT naming the tensor: a dtype
// other than F32 / F16 / BF16, the two of different dtypes, or a shape other than the above.
absl::StatusOr<std::vector<ExpertWeights>> SplitGptOssDenseExperts(
    const std::string& experts_module, const TensorView& gate_up, const TensorView& down, int64_t num_experts,
    int64_t intermediate_size, int64_t hidden_size, TranscodedBuffers* buffers);

// Sets every expert's biases: gate_proj.bias = gate_up_bias[e, 0::2], up_proj.bias = gate_up_bias[e, 1::2]
// (copies appended to `buffers`, 2 per call) and down_proj.bias = down_bias[e] (a view). `experts` holds
// num_experts entries whose I and H are the biases' widths. INVALID_ARGUMENT naming the tensor for a dtype
// other than F32 / F16 / BF16 or a shape other than [E, 2I] / [E, H]; nothing is changed then.
absl::Status SetGptOssExpertBiases(const TensorView& gate_up_bias, const TensorView& down_bias,
                                   int64_t intermediate_size, int64_t hidden_size,
                                   std::vector<ExpertWeights>* experts, TranscodedBuffers* buffers);

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_GPT_OSS_EXPERTS_H_

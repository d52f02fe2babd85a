// The upload of a sparse layer's mixture-of-experts block (DeviceMoe, engine/cuda/device_weights.h): the
// router (replicated, with Qwen2-MoE's shared expert's gate as its last row), every expert and the shared
// expert (each split like the dense MLP under a shard plan), then the grouped-GEMM tables of the experts
// where every expert qualifies (GroupedExperts: which kernels run them is chosen here, once).
// Thread-safety: none (the loading thread).
#ifndef SCORED_ENGINE_CUDA_MOE_UPLOAD_H_
#define SCORED_ENGINE_CUDA_MOE_UPLOAD_H_

#include <string>

#include "absl/status/status.h"
#include "engine/cuda/device_linear.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/rotation_tables.h"
#include "engine/engine.h"
#include "engine/model/layer_plan.h"
#include "engine/model/weights.h"

namespace scored::cuda {

// Uploads `src` (layer `prefix`'s block, "model.layers.N.", planned as `plan`) into *dst. Quantized experts
// with bf16 scales are rounded to bf16 in fp32 mode (DeviceLinear::round_to_bf16). `cut`: the rank's shards
// (cleared expert by expert: the views it handed out before are gone on return). `options`: moe_gemm and
// moe_sm90_schedule pick GroupedExperts::path and sm90_schedule. Errors name the module; UNIMPLEMENTED for a
// router with transform_config rotations; INVALID_ARGUMENT naming the flag for an option outside its enum.
absl::Status BuildMoe(const ExpertsPlan& plan, const MoeWeights& src, ComputeDtype dtype,
                      const std::string& prefix, const UploadOptions& options, LinearCutter* cut,
                      RotationTables* rotations, DeviceMoe* dst);

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_MOE_UPLOAD_H_

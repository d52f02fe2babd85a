// transform_config's online rotations of a model on one GPU (engine/model/transform_config.h): every
// distinct stored matrix (compressed-tensors ties one per size to every module using it) factored
// (engine/model/hadamard_factors.h) and uploaded once, its forward and inverse views handed to the linears
// that use it (DeviceLinear::input_rotations / output_rotations, run by kernels::HadamardRotate).
//
// Used by the upload only (UploadModel, BuildMoe in moe_upload.h); errors are UNIMPLEMENTED naming the
// module for what the CUDA backend does not run. Ownership: owns the tables until Release() hands them to
// the DeviceModel (the views the linears hold point into them). Thread-safety: none (the loading thread).
#ifndef SCORED_ENGINE_CUDA_ROTATION_TABLES_H_
#define SCORED_ENGINE_CUDA_ROTATION_TABLES_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_linear.h"
#include "engine/kernels/hadamard_rotate.h"
#include "engine/model/weights.h"

namespace scored::cuda {

class RotationTables {
 public:
  // Sets `linear`'s rotations from its members' transforms (stacked along `out` in member order).
  // `output_allowed`: whether the linear's output is written in the compute dtype (q|k|v without a bias,
  // gate|up), where an output rotation can run after the GEMM. UNIMPLEMENTED naming the module for what the
  // CUDA backend does not run: members with different input rotations, an output rotation elsewhere, a
  // rotation whose blocks a tensor-parallel shard cuts, a size over the device's shared memory.
  absl::Status Attach(const std::vector<const LinearWeight*>& members, const std::string& what,
                      bool output_allowed, DeviceLinear* linear);

  // The device tables uploaded so far (for DeviceModel::rotation_tables); the object is empty afterwards.
  std::vector<DeviceBuffer> Release() { return std::move(buffers_); }

 private:
  // The rotation by t's matrix of a row `width` wide (a shard's width under tensor parallelism).
  absl::StatusOr<DeviceRotation> Rotation(const LinearTransform& t, const LinearWeight& w, int64_t width);

  // views[0]: forward, views[1]: inverse, per stored matrix (its data pointer).
  std::map<const uint8_t*, std::array<kernels::HadamardRotation, 2>> tables_;
  std::vector<DeviceBuffer> buffers_;
};

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_ROTATION_TABLES_H_

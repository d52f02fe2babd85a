// One linear's weight resident on one GPU, as a GEMM reads it (the model walk that uploads every linear is
// engine/cuda/device_weights.h UploadModel; the format rules are that header's).
//
// A DeviceLinear is one GEMM's weight: a single module, or several sharing one input stacked along `out`
// (q|k|v, gate|up). It is in exactly one of four forms: resident dense in the compute dtype
// (resident_dense()), resident FP8 E4M3 with an fp32 scale per output row (fp8_resident()), resident int8
// with an fp32 scale per output row (int8_resident()), or its parts' stored tensors byte for byte, expanded
// into a scratch before each GEMM (uses_scratch(), Materialize). Built only by the upload: DeviceModelLoader
// below (one linear), MoeUploader (engine/cuda/moe_upload.cc: the grouped experts' reading of a sparse
// layer's linears), RotationTables (engine/cuda/rotation_tables.h); immutable afterwards. Ownership: owns
// every device buffer it points to, except a tied lm_head's matrix (the DeviceModel's embedding).
// Thread-safety: const methods from any thread; the upload's helpers below from the loading thread only.
#ifndef SCORED_ENGINE_CUDA_DEVICE_LINEAR_H_
#define SCORED_ENGINE_CUDA_DEVICE_LINEAR_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/base/status_macros.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/gemm.h"
#include "engine/engine.h"
#include "engine/kernels/dequant.h"
#include "engine/kernels/hadamard_rotate.h"
#include "engine/model/shard_plan.h"
#include "engine/model/weights.h"

namespace scored::cuda {

// One quantized (or dense-but-grouped-with-quantized) member of a fused linear.
struct QuantizedPart {
  int64_t out_features = 0;  // rows of this part
  int64_t in_features = 0;
  int64_t row_offset = 0;            // first row of this part in the fused [out_features, in_features]
  std::vector<DeviceBuffer> stored;  // its tensors as in the checkpoint (values, scale, zero point, g_idx)
  kernels::DequantParams params;     // device view of `stored`
};

// One transform_config online rotation of a linear (engine/model/transform_config.h), run by
// kernels::HadamardRotate over columns [col_offset, col_offset + width) of each row: of the GEMM's input
// (the whole row: col_offset 0, width in_features) or of its output (one part's columns of a stacked group).
// The tables `view` points to are the owning DeviceModel's (DeviceModel::rotation_tables).
struct DeviceRotation {
  int64_t col_offset = 0;
  int64_t width = 0;
  kernels::HadamardRotation view;
};

// A linear layer, or several stacked along `out` (q|k|v, gate|up), as one GEMM's weight.
class DeviceLinear {
 public:
  int64_t out_features() const { return out_features_; }
  int64_t in_features() const { return in_features_; }
  bool resident_dense() const { return parts_.empty() && !fp8_resident() && !int8_resident(); }
  // Expanded into a scratch buffer before each GEMM (Materialize).
  bool uses_scratch() const { return !parts_.empty(); }
  // Resident in FP8 for a real FP8 GEMM (W8A8 per-token, bf16 mode): fp8_weight() and fp8_scale().
  bool fp8_resident() const { return fp8_weight_.bytes() > 0; }
  const uint8_t* fp8_weight() const { return fp8_weight_.as<uint8_t>(); }  // [out_features, in_features] E4M3
  const float* fp8_scale() const { return fp8_scale_.as<float>(); }        // [out_features] fp32
  // W8A8 dynamic FP8 (every part): the GEMM's input is fake-quantized per token first.
  bool w8a8_dynamic_fp8() const { return w8a8_; }
  // W8A8 INT8 (every part): the GEMM's input is fake-quantized to int8 per token first
  // (kernels/int8_quant.h), symmetric or with a zero point per token (act_symmetric()); the weight is
  // expanded like any other.
  bool w8a8_dynamic_int8() const { return w8a8_int8_; }
  // W8A8 INT8 resident in int8 for an int8 tensor-core GEMM (bf16 mode, symmetric channel weights and
  // per-token activations, kernels/int8_gemm.h): int8_weight() and int8_scale(); else the weight is expanded.
  bool int8_resident() const { return int8_weight_.bytes() > 0; }
  const int8_t* int8_weight() const { return int8_weight_.as<int8_t>(); }  // [out_features, in_features]
  const float* int8_scale() const { return int8_scale_.as<float>(); }      // [out_features] fp32
  bool act_symmetric() const { return act_symmetric_; }
  // Static per-tensor activation quantization (input_activations.dynamic false, llm-compressor's FP8 scheme
  // and static INT8): the GEMM's input is fake-quantized with the stored scale (and zero point) first
  // (kernels/static_act_quant.h); the weight is expanded like any other.
  enum class StaticAct { kNone, kFp8, kInt8 };
  StaticAct static_act() const { return static_act_; }
  float static_scale() const { return static_scale_; }            // input_scale widened to fp32
  float static_zero_point() const { return static_zero_point_; }  // input_zero_point, 0 when symmetric
  // W8A8 only: 0 = one activation scale per token, > 0 = one per token per this many input columns.
  int64_t act_group_size() const { return act_group_size_; }
  // Tensor parallelism, W8A8 per-token on a row-parallel shard: the activation scale needs the amax over
  // every rank's input columns (engine/model/shard_plan.h ShardedLinear::act_amax_all_reduce).
  bool act_amax_all_reduce() const { return act_amax_all_reduce_; }

  // fp32 mode, quantized mixture-of-experts weights: Materialize rounds the expansion to bf16 values.
  bool round_to_bf16() const { return round_to_bf16_; }
  // transform_config's online rotations: the input's run in place on the GEMM's input rows before anything
  // else (activation quantization included), in order; the outputs' on the GEMM's output after it (only
  // where that output is written in the compute dtype, not added into the residual: the upload refuses the
  // rest). Empty for checkpoints without transform_config.
  const std::vector<DeviceRotation>& input_rotations() const { return input_rotations_; }
  const std::vector<DeviceRotation>& output_rotations() const { return output_rotations_; }

  // The weight [out_features, in_features] in the compute dtype for a GEMM on `stream`: the resident
  // matrix, or `scratch` after enqueuing the dequantization of every part into it.
  absl::StatusOr<const void*> Materialize(ComputeDtype dtype,
                                          void* scratch,  // [>= out_features * in_features] compute dtype
                                          cudaStream_t stream) const;

  // Bytes this linear keeps on the device.
  int64_t DeviceBytes() const;

 private:
  friend class DeviceModelLoader;
  friend class MoeUploader;
  friend class RotationTables;
  int64_t out_features_ = 0;
  int64_t in_features_ = 0;
  bool w8a8_ = false;
  bool w8a8_int8_ = false;
  bool act_symmetric_ = true;
  int64_t act_group_size_ = 0;
  bool act_amax_all_reduce_ = false;
  StaticAct static_act_ = StaticAct::kNone;
  float static_scale_ = 0.0f;
  float static_zero_point_ = 0.0f;
  DeviceBuffer dense_;               // [out_features, in_features] compute dtype, when resident_dense()
  const void* dense_ptr_ = nullptr;  // dense_.data(), or the embedding table for a tied lm_head
  std::vector<QuantizedPart> parts_;
  DeviceBuffer fp8_weight_;   // [out_features, in_features] FP8 E4M3, when fp8_resident()
  DeviceBuffer fp8_scale_;    // [out_features] fp32, when fp8_resident()
  DeviceBuffer int8_weight_;  // [out_features, in_features] int8, when int8_resident()
  DeviceBuffer int8_scale_;   // [out_features] fp32, when int8_resident()
  std::vector<DeviceRotation> input_rotations_;
  std::vector<DeviceRotation> output_rotations_;
  bool round_to_bf16_ = false;
};

// The upload's helpers for one linear (device_linear.cc, moe_upload.cc, upload_model.cc).

// Bytes of one element of the compute dtype.
inline int64_t ElementBytes(ComputeDtype dtype) { return dtype == ComputeDtype::kBf16 ? 2 : 4; }

// Writes dense `w` into dst ([w.out_features, w.in_features] compute dtype, device): a plain copy when it is
// stored in the compute dtype, else through the dequant kernel's exact conversion. Synchronous.
absl::Status UploadDenseInto(const LinearWeight& w, ComputeDtype dtype, void* dst);

// The rank's view of each linear: the whole linear without a shard plan, else its ShardLinear cut, whose host
// copies (row-parallel slices, re-packed group scales) this object owns until Clear() (one layer's worth).
// std::deque: the views keep their addresses while more are cut.
class LinearCutter {
 public:
  explicit LinearCutter(const ShardPlan* plan) : plan_(plan) {}

  absl::StatusOr<const LinearWeight*> Cut(const LinearWeight& full, LinearRole role) {
    last_amax_ = false;
    if (plan_ == nullptr) return &full;
    SCORED_ASSIGN_OR_RETURN(ShardedLinear shard, ShardLinear(full, plan_->ForLinear(role), plan_->tp_rank));
    last_amax_ = shard.act_amax_all_reduce;
    keep_.push_back(std::move(shard));
    return &keep_.back().view;
  }
  // Whether the last cut is a row-parallel W8A8 shard whose per-token activation amax is all-reduced
  // (ShardedLinear::act_amax_all_reduce).
  bool last_act_amax_all_reduce() const { return last_amax_; }
  void Clear() { keep_.clear(); }

 private:
  const ShardPlan* plan_;
  std::deque<ShardedLinear> keep_;
  bool last_amax_ = false;
};

// The upload of one linear (device_linear.cc). Errors name the module (`what`).
class DeviceModelLoader {
 public:
  // Stacks `members` along `out` into one linear. All dense: one resident matrix; W8A8 per-token FP8 that a
  // real FP8 GEMM writing `fp8_types`' output can run (fp8_gemm, Fp8GemmEligible): one resident FP8 matrix
  // and fp32 scale vector; W8A8 INT8 the int8 GEMM runs (Int8GemmEligible): one resident int8 matrix and
  // fp32 scale vector; otherwise every member keeps its stored tensors and is expanded into the scratch
  // before each use.
  static absl::StatusOr<DeviceLinear> Build(const std::vector<const LinearWeight*>& members,
                                            ComputeDtype dtype, const std::string& what,
                                            bool act_amax_all_reduce = false,
                                            GemmTypes fp8_types = GemmTypes::kFp8ToBf16,
                                            bool fp8_gemm = true);
  // Static per-tensor activation quantization (input_activations.dynamic false): the members sharing one
  // input must agree on it (calibration observes the same tensor for q, k and v, or gate and up, so
  // llm-compressor stores equal scales); a group that does not is refused naming both modules.
  static absl::Status SetStaticActivations(const std::vector<const LinearWeight*>& members,
                                           const std::string& what, DeviceLinear* linear);
  // A quantized lm_head (rare: most checkpoints ignore it) is expanded once at load.
  static absl::Status MakeResident(DeviceLinear* linear, ComputeDtype dtype, const std::string& what);
  // A tied lm_head: a view of the embedding table ([vocab_size, hidden_size] compute dtype).
  static void TieTo(DeviceLinear* linear, const DeviceBuffer& table, int64_t vocab_size, int64_t hidden_size);
};

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_DEVICE_LINEAR_H_

#include "engine/cuda/device_weights.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/logging.h"
#include "engine/base/status_macros.h"
#include "engine/cuda/gemm.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/int8_gemm.h"
#include "engine/kernels/kernel_types.h"
#include "engine/kernels/round_bf16.h"
#include "engine/model/hadamard_factors.h"
#include "engine/model/rope_freq.h"

namespace scored::cuda {

using kernels::bf16_t;

namespace {

int64_t ElementBytes(ComputeDtype dtype) { return dtype == ComputeDtype::kBf16 ? 2 : 4; }

DType StorageDType(ComputeDtype dtype) { return dtype == ComputeDtype::kBf16 ? DType::kBF16 : DType::kF32; }

// A norm weight widened to fp32; Gemma's (config.gemma_norm) stored as fp32(1 + weight), what its RMSNorm
// multiplies by (ref::OffsetNormWeight: the same fp32 add).
absl::StatusOr<DeviceBuffer> UploadNorm(const TensorView& t, const std::string& what, bool offset) {
  std::vector<float> host(t.NumElements());
  SCORED_RETURN_IF_ERROR(TensorToFloat(t, host.data(), static_cast<int64_t>(host.size())));
  if (offset) {
    for (float& w : host) w = 1.0f + w;
  }
  return UploadToDevice(host.data(), static_cast<int64_t>(host.size() * sizeof(float)), what);
}

absl::StatusOr<DeviceBuffer> UploadFloats(const std::vector<float>& host, const std::string& what) {
  return UploadToDevice(host.data(), static_cast<int64_t>(host.size() * sizeof(float)), what);
}

// Every stored tensor of `w`, byte for byte, and the dequant kernel's view of them.
absl::StatusOr<QuantizedPart> UploadStored(const LinearWeight& w, int64_t row_offset) {
  QuantizedPart part;
  part.out_features = w.out_features;
  part.in_features = w.in_features;
  part.row_offset = row_offset;
  kernels::DequantDevicePointers ptrs;
  const std::pair<const TensorView*, const void**> tensors[] = {
      {&w.weight, &ptrs.weight},
      {&w.weight_packed, &ptrs.weight_packed},
      {&w.weight_scale, &ptrs.weight_scale},
      {&w.weight_zero_point, &ptrs.weight_zero_point},
      {&w.weight_g_idx, &ptrs.weight_g_idx},
  };
  for (const auto& [view, ptr] : tensors) {
    if (!view->present()) continue;
    SCORED_ASSIGN_OR_RETURN(DeviceBuffer buffer, UploadToDevice(view->data, view->nbytes, view->name));
    *ptr = buffer.data();
    part.stored.push_back(std::move(buffer));
  }
  SCORED_ASSIGN_OR_RETURN(part.params, kernels::MakeDequantParams(w, ptrs));
  return part;
}

// Writes dense `w` into dst ([w.out_features, w.in_features] compute dtype, device): a plain copy when it is
// stored in the compute dtype, else through the dequant kernel's exact conversion.
absl::Status UploadDenseInto(const LinearWeight& w, ComputeDtype dtype, void* dst) {
  if (w.weight.dtype == StorageDType(dtype)) {
    SCORED_CUDA_CHECK(
        cudaMemcpy(dst, w.weight.data, static_cast<size_t>(w.weight.nbytes), cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }
  SCORED_ASSIGN_OR_RETURN(QuantizedPart part, UploadStored(w, 0));
  if (dtype == ComputeDtype::kBf16) {
    SCORED_RETURN_IF_ERROR(
        kernels::Dequantize<bf16_t>(part.params, 0, w.out_features, static_cast<bf16_t*>(dst), nullptr));
  } else {
    SCORED_RETURN_IF_ERROR(
        kernels::Dequantize<float>(part.params, 0, w.out_features, static_cast<float*>(dst), nullptr));
  }
  SCORED_CUDA_CHECK(cudaStreamSynchronize(nullptr));  // `part` is freed on return
  return absl::OkStatus();
}

absl::Status DequantizeInto(const QuantizedPart& part, ComputeDtype dtype, char* fused, cudaStream_t stream) {
  const int64_t rows = part.out_features;
  const int64_t offset = part.row_offset * part.in_features * ElementBytes(dtype);
  if (dtype == ComputeDtype::kBf16) {
    return kernels::Dequantize<bf16_t>(part.params, 0, rows, reinterpret_cast<bf16_t*>(fused + offset),
                                       stream);
  }
  return kernels::Dequantize<float>(part.params, 0, rows, reinterpret_cast<float*>(fused + offset), stream);
}

// Whether the group `members` (all W8A8) can run as a real FP8 GEMM in compute dtype `dtype`.
bool Fp8GemmEligible(const std::vector<const LinearWeight*>& members, ComputeDtype dtype,
                     int64_t out_features, int64_t in_features, GemmTypes gemm_types) {
  if (dtype != ComputeDtype::kBf16 || out_features % 16 != 0 || in_features % 16 != 0) return false;
  for (const LinearWeight* m : members) {
    if (!m->w8a8_dynamic_fp8 || m->act_group_size != 0 || m->format != WeightFormat::kFloatQuantized ||
        m->weight.dtype != DType::kF8E4M3 || !m->weight.present() || !m->weight_scale.present()) {
      return false;
    }
    const int64_t scales = m->weight_scale.NumElements();
    const bool tensor = m->strategy == QuantStrategy::kTensor && scales == 1;
    const bool channel = m->strategy == QuantStrategy::kChannel && scales == m->out_features;
    if (!tensor && !channel) return false;
    if (m->weight.nbytes != m->out_features * m->in_features) return false;
  }
  return GemmRunner::Fp8Supported(gemm_types);
}

// Whether the group `members` (all W8A8 INT8) can run on int8 tensor cores (kernels/int8_gemm.h) in compute
// dtype `dtype`: bf16 mode (fp32 mode keeps the emulated path, as FP8 does), channel- or tensor-wise
// symmetric int8 weights, symmetric per-token activations, shapes the kernel takes, a device that runs it.
bool Int8GemmEligible(const std::vector<const LinearWeight*>& members, ComputeDtype dtype,
                      int64_t out_features, int64_t in_features) {
  if (dtype != ComputeDtype::kBf16 || !kernels::CheckInt8GemmShape(1, out_features, in_features).ok()) {
    return false;
  }
  for (const LinearWeight* m : members) {
    if (!m->w8a8_dynamic_int8 || !m->act_symmetric || m->act_group_size != 0 ||
        m->format != WeightFormat::kNaiveQuantized || !m->symmetric || m->weight_zero_point.present() ||
        m->weight.dtype != DType::kI8 || !m->weight.present() || !m->weight_scale.present() ||
        m->weight.nbytes != m->out_features * m->in_features) {
      return false;
    }
    const int64_t scales = m->weight_scale.NumElements();
    const bool tensor = m->strategy == QuantStrategy::kTensor && scales == 1;
    const bool channel = m->strategy == QuantStrategy::kChannel && scales == m->out_features;
    if (!tensor && !channel) return false;
  }
  int device = 0;
  return cudaGetDevice(&device) == cudaSuccess && kernels::Int8GemmSupported(device);
}

}  // namespace

absl::StatusOr<const void*> DeviceLinear::Materialize(ComputeDtype dtype, void* scratch,
                                                      cudaStream_t stream) const {
  if (fp8_resident()) {
    return absl::FailedPreconditionError("an FP8-resident linear is not materialized: run it with Fp8Linear");
  }
  if (int8_resident()) {
    return absl::FailedPreconditionError(
        "an INT8-resident linear is not materialized: run it with Int8Linear");
  }
  if (resident_dense()) return dense_ptr_;
  for (const QuantizedPart& part : parts_) {
    SCORED_RETURN_IF_ERROR(DequantizeInto(part, dtype, static_cast<char*>(scratch), stream));
  }
  if (round_to_bf16_ && dtype == ComputeDtype::kFp32) {
    SCORED_RETURN_IF_ERROR(
        kernels::RoundToBf16InPlace(static_cast<float*>(scratch), out_features_ * in_features_, stream));
  }
  return static_cast<const void*>(scratch);
}

int64_t DeviceLinear::DeviceBytes() const {
  int64_t bytes =
      dense_.bytes() + fp8_weight_.bytes() + fp8_scale_.bytes() + int8_weight_.bytes() + int8_scale_.bytes();
  for (const QuantizedPart& part : parts_) {
    for (const DeviceBuffer& b : part.stored) bytes += b.bytes();
  }
  return bytes;
}

// transform_config's rotations of a model: every distinct stored matrix (compressed-tensors ties one per
// size to every module using it) factored (engine/model/hadamard_factors.h) and uploaded once.
class RotationTables {
 public:
  // Sets `linear`'s rotations from its members' transforms (stacked along `out` in member order).
  // `output_allowed`: whether the linear's output is written in the compute dtype (q|k|v without a bias,
  // gate|up), where an output rotation can run after the GEMM. UNIMPLEMENTED naming the module for what the
  // CUDA backend does not run: members with different input rotations, an output rotation elsewhere, a
  // rotation whose blocks a tensor-parallel shard cuts, a size over the device's shared memory.
  absl::Status Attach(const std::vector<const LinearWeight*>& members, const std::string& what,
                      bool output_allowed, DeviceLinear* linear) {
    const LinearWeight& first = *members.front();
    for (const LinearWeight* m : members) {
      if (!SameRotations(Inputs(*m), Inputs(first))) {
        return Unimplemented(what, absl::StrCat(first.module, " and ", m->module,
                                                " share one input but differ in their input rotations"));
      }
    }
    for (const LinearTransform* t : Inputs(first)) {
      SCORED_ASSIGN_OR_RETURN(DeviceRotation r, Rotation(*t, first, first.in_features));
      r.width = first.in_features;
      linear->input_rotations_.push_back(r);
    }
    int64_t row = 0;
    for (const LinearWeight* m : members) {
      for (const LinearTransform& t : m->transforms) {
        if (!t.output) continue;
        if (!output_allowed) {
          return Unimplemented(m->module,
                               "an output rotation of a linear whose output has a bias or is added "
                               "into the residual stream");
        }
        SCORED_ASSIGN_OR_RETURN(DeviceRotation r, Rotation(t, *m, m->out_features));
        r.col_offset = row;
        r.width = m->out_features;
        linear->output_rotations_.push_back(r);
      }
      row += m->out_features;
    }
    return absl::OkStatus();
  }

  std::vector<DeviceBuffer> Release() { return std::move(buffers_); }

 private:
  static std::vector<const LinearTransform*> Inputs(const LinearWeight& w) {
    std::vector<const LinearTransform*> inputs;
    for (const LinearTransform& t : w.transforms) {
      if (!t.output) inputs.push_back(&t);
    }
    return inputs;
  }
  // The same matrices (tied: the same stored tensor) in the same directions and order.
  static bool SameRotations(const std::vector<const LinearTransform*>& a,
                            const std::vector<const LinearTransform*>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i]->matrix.data != b[i]->matrix.data || a[i]->inverse != b[i]->inverse) return false;
    }
    return true;
  }
  static absl::Status Unimplemented(const std::string& what, const std::string& why) {
    return absl::UnimplementedError(absl::StrCat(
        what, ": transform_config: ", why, " is not implemented on the CUDA backend; use --backend=cpu"));
  }

  // The rotation by t's matrix of a row `width` wide (a shard's width under tensor parallelism).
  absl::StatusOr<DeviceRotation> Rotation(const LinearTransform& t, const LinearWeight& w, int64_t width) {
    const int64_t n = t.matrix.shape.empty() ? 0 : t.matrix.shape[0];
    if (n <= 0 || width % n != 0) {
      return Unimplemented(w.module, absl::StrCat("a rotation of size ", n, " over ", width,
                                                  " columns (a tensor-parallel shard cuts its blocks)"));
    }
    int device = 0;
    SCORED_CUDA_CHECK(cudaGetDevice(&device));
    if (n > kernels::MaxHadamardRotationSize(device)) {
      return Unimplemented(w.module, absl::StrCat("a rotation of size ", n,
                                                  " (this device's shared memory "
                                                  "holds at most ",
                                                  kernels::MaxHadamardRotationSize(device), ")"));
    }
    auto it = tables_.find(t.matrix.data);
    if (it == tables_.end()) {
      SCORED_ASSIGN_OR_RETURN(const HadamardFactors f, FactorHadamard(t.matrix));
      if (f.core_size > kernels::kMaxHadamardCore) {
        return Unimplemented(w.module, absl::StrCat("a rotation whose matrix factors no further than a ",
                                                    f.core_size, "x", f.core_size, " core"));
      }
      // views[0]: forward, views[1]: inverse; they share the signs.
      std::array<kernels::HadamardRotation, 2> views;
      SCORED_ASSIGN_OR_RETURN(DeviceBuffer signs,
                              UploadToDevice(f.signs.data(), f.size, t.matrix.name + " signs"));
      for (int inverse = 0; inverse < 2; ++inverse) {
        const std::vector<uint8_t> bits =
            kernels::PackHadamardCore(f.core, static_cast<int32_t>(f.core_size), inverse == 1);
        SCORED_ASSIGN_OR_RETURN(
            DeviceBuffer core,
            UploadToDevice(bits.data(), static_cast<int64_t>(bits.size()), t.matrix.name + " core"));
        kernels::HadamardRotation& view = views[inverse];
        view.size = static_cast<int32_t>(f.size);
        view.chunk = static_cast<int32_t>(f.chunk);
        view.core_size = static_cast<int32_t>(f.core_size);
        view.signs = signs.as<int8_t>();
        view.core_bits = core.as<uint8_t>();
        view.inverse = inverse == 1;
        buffers_.push_back(std::move(core));
      }
      buffers_.push_back(std::move(signs));
      it = tables_.emplace(t.matrix.data, views).first;
    }
    DeviceRotation r;
    r.view = it->second[t.inverse ? 1 : 0];
    return r;
  }

  std::map<const uint8_t*, std::array<kernels::HadamardRotation, 2>> tables_;
  std::vector<DeviceBuffer> buffers_;
};

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

class DeviceModelLoader {
 public:
  // Stacks `members` along `out` into one linear. All dense: one resident matrix; W8A8 per-token FP8 that a
  // real FP8 GEMM writing `fp8_types`' output can run (fp8_gemm, Fp8GemmEligible): one resident FP8 matrix
  // and fp32 scale vector;
  // otherwise every member keeps its stored tensors and is expanded into the scratch before each use.
  static absl::StatusOr<DeviceLinear> Build(const std::vector<const LinearWeight*>& members,
                                            ComputeDtype dtype, const std::string& what,
                                            bool act_amax_all_reduce = false,
                                            GemmTypes fp8_types = GemmTypes::kFp8ToBf16,
                                            bool fp8_gemm = true) {
    DeviceLinear linear;
    linear.act_amax_all_reduce_ = act_amax_all_reduce;
    linear.in_features_ = members.front()->in_features;
    bool all_dense = true, any_w8a8 = false, all_w8a8 = true;
    const LinearWeight& first = *members.front();
    SCORED_RETURN_IF_ERROR(SetStaticActivations(members, what, &linear));
    for (const LinearWeight* m : members) {
      if (m->w8a8_dynamic_int8 != first.w8a8_dynamic_int8 ||
          (m->w8a8_dynamic_int8 && m->act_symmetric != first.act_symmetric)) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": int8 activation quantization differs between the modules sharing one input"));
      }
      if (m->in_features != linear.in_features_) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": ", m->module, " has ", m->in_features,
                                                       " input features, expected ", linear.in_features_));
      }
      linear.out_features_ += m->out_features;
      all_dense = all_dense && m->format == WeightFormat::kDense;
      any_w8a8 = any_w8a8 || m->w8a8_dynamic_fp8;
      all_w8a8 = all_w8a8 && m->w8a8_dynamic_fp8;
    }
    if (any_w8a8 && !all_w8a8) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": W8A8 dynamic FP8 on some but not all of the modules sharing one input"));
    }
    linear.w8a8_ = all_w8a8;
    linear.w8a8_int8_ = first.w8a8_dynamic_int8;
    linear.act_symmetric_ = first.act_symmetric;
    linear.act_group_size_ = members.front()->act_group_size;
    for (const LinearWeight* m : members) {
      if (m->act_group_size != linear.act_group_size_ ||
          (m->act_group_size > 0 && linear.in_features_ % m->act_group_size != 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": W8A8 activation groups differ between modules or do not divide the input"));
      }
    }
    int64_t row = 0;
    if (all_dense) {
      SCORED_ASSIGN_OR_RETURN(
          linear.dense_,
          DeviceBuffer::Allocate(linear.out_features_ * linear.in_features_ * ElementBytes(dtype), what));
      for (const LinearWeight* m : members) {
        SCORED_RETURN_IF_ERROR(UploadDenseInto(
            *m, dtype, linear.dense_.as<char>() + row * linear.in_features_ * ElementBytes(dtype)));
        row += m->out_features;
      }
      linear.dense_ptr_ = linear.dense_.data();
      return linear;
    }
    if (fp8_gemm && all_w8a8 &&
        Fp8GemmEligible(members, dtype, linear.out_features_, linear.in_features_, fp8_types)) {
      // The parts' E4M3 bytes stacked along `out`, their scales widened to fp32 (exact) per output row.
      SCORED_ASSIGN_OR_RETURN(linear.fp8_weight_,
                              DeviceBuffer::Allocate(linear.out_features_ * linear.in_features_, what));
      std::vector<float> scales(linear.out_features_);
      for (const LinearWeight* m : members) {
        SCORED_CUDA_CHECK(cudaMemcpy(linear.fp8_weight_.as<uint8_t>() + row * linear.in_features_,
                                     m->weight.data, static_cast<size_t>(m->weight.nbytes),
                                     cudaMemcpyHostToDevice));
        const int64_t count = m->weight_scale.NumElements();
        SCORED_RETURN_IF_ERROR(TensorToFloat(m->weight_scale, scales.data() + row, count));
        for (int64_t r = count; r < m->out_features; ++r) scales[row + r] = scales[row];  // tensor scale
        row += m->out_features;
      }
      SCORED_ASSIGN_OR_RETURN(
          linear.fp8_scale_,
          UploadToDevice(scales.data(), static_cast<int64_t>(scales.size() * sizeof(float)),
                         what + " scales"));
      return linear;
    }
    if (Int8GemmEligible(members, dtype, linear.out_features_, linear.in_features_)) {
      // The parts' int8 bytes stacked along `out`, their scales widened to fp32 (exact) per output row.
      SCORED_ASSIGN_OR_RETURN(linear.int8_weight_,
                              DeviceBuffer::Allocate(linear.out_features_ * linear.in_features_, what));
      std::vector<float> scales(linear.out_features_);
      for (const LinearWeight* m : members) {
        SCORED_CUDA_CHECK(cudaMemcpy(linear.int8_weight_.as<int8_t>() + row * linear.in_features_,
                                     m->weight.data, static_cast<size_t>(m->weight.nbytes),
                                     cudaMemcpyHostToDevice));
        const int64_t count = m->weight_scale.NumElements();
        SCORED_RETURN_IF_ERROR(TensorToFloat(m->weight_scale, scales.data() + row, count));
        for (int64_t r = count; r < m->out_features; ++r) scales[row + r] = scales[row];  // tensor scale
        row += m->out_features;
      }
      SCORED_ASSIGN_OR_RETURN(
          linear.int8_scale_,
          UploadToDevice(scales.data(), static_cast<int64_t>(scales.size() * sizeof(float)),
                         what + " scales"));
      return linear;
    }
    for (const LinearWeight* m : members) {
      SCORED_ASSIGN_OR_RETURN(QuantizedPart part, UploadStored(*m, row));
      linear.parts_.push_back(std::move(part));
      row += m->out_features;
    }
    return linear;
  }

  // Static per-tensor activation quantization (input_activations.dynamic false): the members sharing one
  // input must agree on it (calibration observes the same tensor for q, k and v, or gate and up, so
  // llm-compressor stores equal scales); a group that does not is refused naming both modules.
  static absl::Status SetStaticActivations(const std::vector<const LinearWeight*>& members,
                                           const std::string& what, DeviceLinear* linear) {
    const LinearWeight& first = *members.front();
    for (const LinearWeight* m : members) {
      DeviceLinear::StaticAct kind = DeviceLinear::StaticAct::kNone;
      float scale = 0.0f, zero_point = 0.0f;
      if (m->static_input_fp8 || m->static_input_int8) {
        kind = m->static_input_fp8 ? DeviceLinear::StaticAct::kFp8 : DeviceLinear::StaticAct::kInt8;
        SCORED_RETURN_IF_ERROR(TensorToFloat(m->input_scale, &scale, 1));
        if (m->input_zero_point.present()) {
          zero_point = static_cast<float>(static_cast<int8_t>(m->input_zero_point.data[0]));
        }
      }
      if (m == &first) {
        linear->static_act_ = kind;
        linear->static_scale_ = scale;
        linear->static_zero_point_ = zero_point;
      } else if (kind != linear->static_act_ || scale != linear->static_scale_ ||
                 zero_point != linear->static_zero_point_) {
        return absl::UnimplementedError(absl::StrCat(
            what, ": ", first.module, " and ", m->module,
            " share one input but differ in input_activations / input_scale / input_zero_point (static "
            "activation quantization per module of a fused group is not implemented on the CUDA backend; use "
            "--backend=cpu)"));
      }
    }
    return absl::OkStatus();
  }

  // A quantized lm_head (rare: most checkpoints ignore it) is expanded once at load.
  static absl::Status MakeResident(DeviceLinear* linear, ComputeDtype dtype, const std::string& what) {
    if (linear->resident_dense()) return absl::OkStatus();
    SCORED_ASSIGN_OR_RETURN(
        linear->dense_,
        DeviceBuffer::Allocate(linear->out_features_ * linear->in_features_ * ElementBytes(dtype), what));
    SCORED_RETURN_IF_ERROR(linear->Materialize(dtype, linear->dense_.data(), nullptr).status());
    SCORED_CUDA_CHECK(cudaStreamSynchronize(nullptr));
    linear->parts_.clear();
    linear->dense_ptr_ = linear->dense_.data();
    return absl::OkStatus();
  }

  // A sparse layer's block (DeviceMoe). Quantized experts with bf16 scales are rounded to bf16 in fp32 mode.
  // A sparse layer's router (replicated, with the shared expert's gate as its last row) and experts (each
  // split like the dense MLP under a shard plan: `cut`).
  static absl::Status BuildMoe(const ModelConfig& config, const MoeWeights& src, ComputeDtype dtype,
                               const std::string& prefix, LinearCutter* cut, RotationTables* rotations,
                               DeviceMoe* dst) {
    const std::string mlp = prefix + "mlp.";
    dst->shared = config.shared_expert_intermediate_size > 0;
    std::vector<const LinearWeight*> router;
    SCORED_ASSIGN_OR_RETURN(router.emplace_back(), cut->Cut(src.router, LinearRole::kRouter));
    if (dst->shared) {
      SCORED_ASSIGN_OR_RETURN(router.emplace_back(),
                              cut->Cut(src.shared_expert_gate, LinearRole::kSharedExpertGate));
    }
    SCORED_ASSIGN_OR_RETURN(dst->router,
                            Build(router, dtype, mlp + "gate (router)", false, GemmTypes::kFp8ToFp32, false));
    for (const LinearWeight* w : router) {  // the experts read the router's input after it: not rotated
      if (!w->transforms.empty()) {
        return absl::UnimplementedError(absl::StrCat(w->module,
                                                     ": transform_config rotations of the router "
                                                     "are not implemented on the CUDA backend"));
      }
    }
    const auto expert = [&](const ExpertWeights& x, bool shared, const std::string& what,
                            DeviceLinear* gate_up, DeviceLinear* down) -> absl::Status {
      SCORED_ASSIGN_OR_RETURN(
          const LinearWeight* gate,
          cut->Cut(x.gate_proj, shared ? LinearRole::kSharedGate : LinearRole::kExpertGate));
      SCORED_ASSIGN_OR_RETURN(const LinearWeight* up,
                              cut->Cut(x.up_proj, shared ? LinearRole::kSharedUp : LinearRole::kExpertUp));
      SCORED_ASSIGN_OR_RETURN(
          const LinearWeight* dn,
          cut->Cut(x.down_proj, shared ? LinearRole::kSharedDown : LinearRole::kExpertDown));
      const bool down_amax = cut->last_act_amax_all_reduce();
      SCORED_ASSIGN_OR_RETURN(*gate_up, Build({gate, up}, dtype, what + " gate|up"));
      SCORED_ASSIGN_OR_RETURN(*down,
                              Build({dn}, dtype, what + ".down_proj", down_amax, GemmTypes::kFp8ToFp32));
      SCORED_RETURN_IF_ERROR(rotations->Attach({gate, up}, what + " gate|up", true, gate_up));
      SCORED_RETURN_IF_ERROR(rotations->Attach({dn}, what + ".down_proj", false, down));
      for (const auto& [linear, w] :
           {std::pair<DeviceLinear*, const LinearWeight*>{gate_up, gate}, {down, dn}}) {
        linear->round_to_bf16_ = linear->uses_scratch() && w->format != WeightFormat::kDense &&
                                 w->weight_scale.dtype == DType::kBF16;
      }
      return absl::OkStatus();
    };
    dst->gate_up.resize(src.experts.size());
    dst->down.resize(src.experts.size());
    for (size_t e = 0; e < src.experts.size(); ++e) {
      SCORED_RETURN_IF_ERROR(
          expert(src.experts[e], false, absl::StrCat(mlp, "experts.", e), &dst->gate_up[e], &dst->down[e]));
      cut->Clear();  // the expert is on the device: its shards' host copies can go
    }
    if (dst->shared) {
      SCORED_RETURN_IF_ERROR(
          expert(src.shared_expert, true, mlp + "shared_expert", &dst->shared_gate_up, &dst->shared_down));
      dst->shared_gate_up.round_to_bf16_ = dst->shared_down.round_to_bf16_ = false;  // an ordinary MLP
    }
    return BuildGroupedExperts(dtype, dst);
  }

  // A linear the grouped GEMMs can read as it is: no activation quantization, rotations or FP8 / INT8
  // residency, the shape of expert 0's.
  static bool GroupedPlain(const DeviceLinear& l, const DeviceLinear& first) {
    return !l.w8a8_ && !l.w8a8_int8_ && l.static_act_ == DeviceLinear::StaticAct::kNone &&
           l.input_rotations_.empty() && l.output_rotations_.empty() && !l.fp8_resident() &&
           !l.int8_resident() && l.out_features_ == first.out_features_ &&
           l.in_features_ == first.in_features_;
  }

  // A 4-bit pack-quantized linear (one or two stacked parts) as a GroupedInt4Expert, with its format; false
  // where the grouped kernel cannot read it (GroupedGemmInt4's limits).
  static bool GroupedInt4(const DeviceLinear& l, kernels::GroupedInt4Expert* ex,
                          kernels::GroupedInt4Format* f) {
    if (l.parts_.empty() || l.parts_.size() > 2) return false;
    const int64_t k = l.in_features_;
    for (size_t i = 0; i < l.parts_.size(); ++i) {
      const QuantizedPart& part = l.parts_[i];
      const kernels::DequantParams& p = part.params;
      const bool group = p.strategy == QuantStrategy::kGroup;
      const int64_t group_size = group ? p.group_size : 0;
      const int64_t scale_cols = group ? (group_size > 0 ? k / group_size : 0) : 1;
      if (p.format != WeightFormat::kPackQuantized || p.num_bits != 4 || p.g_idx != nullptr ||
          p.values_dtype != DType::kI32 || p.values_cols != k / 8 || p.in_features != k ||
          (!group && p.strategy != QuantStrategy::kChannel) ||
          (group && group_size != 32 && group_size != 64 && group_size != 128) ||
          (group && k % group_size != 0) || p.scale_cols != scale_cols ||
          (p.scale_dtype != DType::kF32 && p.scale_dtype != DType::kF16 && p.scale_dtype != DType::kBF16) ||
          (!p.symmetric && (p.zero_point == nullptr || p.zero_point_dtype != DType::kI32 ||
                            p.zero_point_cols != scale_cols)) ||
          part.row_offset != (i == 0 ? 0 : l.parts_[0].out_features)) {
        return false;
      }
      kernels::GroupedInt4Format part_format;
      part_format.scale_dtype = p.scale_dtype;
      part_format.group_size = group_size;
      part_format.symmetric = p.symmetric;
      if (i == 0) {
        *f = part_format;
      } else if (part_format.scale_dtype != f->scale_dtype || part_format.group_size != f->group_size ||
                 part_format.symmetric != f->symmetric) {
        return false;
      }
      ex->parts[i].packed = static_cast<const int32_t*>(p.values);
      ex->parts[i].scale = p.scale;
      ex->parts[i].zero_point = p.symmetric ? nullptr : static_cast<const int32_t*>(p.zero_point);
    }
    const int64_t last = static_cast<int64_t>(l.parts_.size()) - 1;
    if (l.parts_[last].row_offset + l.parts_[last].out_features != l.out_features_) return false;
    ex->split = l.parts_.size() == 2 ? l.parts_[1].row_offset : l.out_features_;
    return true;
  }

  // DeviceMoe::grouped: the experts' tables where every expert qualifies (GroupedExperts), else disabled.
  static absl::Status BuildGroupedExperts(ComputeDtype dtype, DeviceMoe* moe) {
    moe->grouped = GroupedExperts();
    if (dtype != ComputeDtype::kBf16 || moe->gate_up.empty()) return absl::OkStatus();
    const DeviceLinear& gu0 = moe->gate_up[0];
    const DeviceLinear& dn0 = moe->down[0];
    const auto supports = [&](bool int4) {
      return kernels::GroupedGemmSupports(gu0.out_features(), gu0.in_features(), int4) &&
             kernels::GroupedGemmSupports(dn0.out_features(), dn0.in_features(), int4);
    };
    if (!supports(false) || dn0.in_features() * 2 != gu0.out_features()) return absl::OkStatus();
    const size_t experts = moe->gate_up.size();
    std::vector<const void*> dense_gu, dense_dn;
    std::vector<kernels::GroupedInt4Expert> int4_gu(experts), int4_dn(experts);
    kernels::GroupedInt4Format gu_format, dn_format;
    for (size_t e = 0; e < experts; ++e) {
      const DeviceLinear& gu = moe->gate_up[e];
      const DeviceLinear& dn = moe->down[e];
      if (!GroupedPlain(gu, gu0) || !GroupedPlain(dn, dn0)) return absl::OkStatus();
      if (gu.resident_dense() && dn.resident_dense()) {
        dense_gu.push_back(gu.dense_ptr_);
        dense_dn.push_back(dn.dense_ptr_);
        continue;
      }
      kernels::GroupedInt4Format f_gu, f_dn;
      if (!GroupedInt4(gu, &int4_gu[e], &f_gu) || !GroupedInt4(dn, &int4_dn[e], &f_dn))
        return absl::OkStatus();
      const auto same = [](const kernels::GroupedInt4Format& a, const kernels::GroupedInt4Format& b) {
        return a.scale_dtype == b.scale_dtype && a.group_size == b.group_size && a.symmetric == b.symmetric;
      };
      if (e == 0) {
        gu_format = f_gu;
        dn_format = f_dn;
      } else if (!same(f_gu, gu_format) || !same(f_dn, dn_format)) {
        return absl::OkStatus();
      }
    }
    GroupedExperts g;
    if (dense_gu.size() == experts) {
      SCORED_ASSIGN_OR_RETURN(g.gate_up, UploadToDevice(dense_gu.data(), experts * sizeof(void*),
                                                        "the grouped gate|up weight table"));
      SCORED_ASSIGN_OR_RETURN(
          g.down, UploadToDevice(dense_dn.data(), experts * sizeof(void*), "the grouped down weight table"));
    } else if (dense_gu.empty() && supports(true)) {
      const int64_t bytes = static_cast<int64_t>(experts * sizeof(kernels::GroupedInt4Expert));
      SCORED_ASSIGN_OR_RETURN(
          g.gate_up, UploadToDevice(int4_gu.data(), bytes, "the grouped 4-bit gate|up weight table"));
      SCORED_ASSIGN_OR_RETURN(g.down,
                              UploadToDevice(int4_dn.data(), bytes, "the grouped 4-bit down weight table"));
      g.int4 = true;
      g.gate_up_format = gu_format;
      g.down_format = dn_format;
    } else {
      return absl::OkStatus();  // some experts dense, some quantized, or an int4 k not a multiple of 32
    }
    SCORED_ASSIGN_OR_RETURN(g.path, ChooseGroupedPath(g.int4, gu0, dn0));
    SCORED_ASSIGN_OR_RETURN(g.sm90_schedule, ChooseSm90Schedule());
    g.enabled = true;
    moe->grouped = std::move(g);
    return absl::OkStatus();
  }

  // GroupedExperts::sm90_schedule: SCORED_MOE_SM90_SCHEDULE, read once per process.
  static absl::StatusOr<kernels::GroupedGemmSm90Schedule> ChooseSm90Schedule() {
    static const std::string* const choice = [] {
      const char* env = std::getenv("SCORED_MOE_SM90_SCHEDULE");
      return new std::string(env != nullptr ? env : "");
    }();
    if (choice->empty() || *choice == "cooperative") return kernels::GroupedGemmSm90Schedule::kCooperative;
    if (*choice == "cooperative2x1") return kernels::GroupedGemmSm90Schedule::kCooperative2x1;
    if (*choice == "pingpong") return kernels::GroupedGemmSm90Schedule::kPingpong;
    return absl::InvalidArgumentError(absl::StrCat("SCORED_MOE_SM90_SCHEDULE='", *choice,
                                                   "': expected cooperative, cooperative2x1 or pingpong"));
  }

  // GroupedExperts::path for a layer whose experts are grouped (SCORED_MOE_GEMM, the device, the shapes).
  static absl::StatusOr<GroupedGemmPath> ChooseGroupedPath(bool int4, const DeviceLinear& gu0,
                                                           const DeviceLinear& dn0) {
    // The variable's value, read once per process ("" when unset).
    static const std::string* const choice = [] {
      const char* env = std::getenv("SCORED_MOE_GEMM");
      return new std::string(env != nullptr ? env : "");
    }();
    const bool dequant = choice->empty() || *choice == "sm90_dequant";  // the default
    if (*choice == "mma") return GroupedGemmPath::kMma;
    if (!choice->empty() && *choice != "sm90" && !dequant) {
      return absl::InvalidArgumentError(
          absl::StrCat("SCORED_MOE_GEMM='", *choice, "': expected mma, sm90 or sm90_dequant"));
    }
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
      cudaGetLastError();
      return GroupedGemmPath::kMma;
    }
    if (!kernels::GroupedGemmSm90Supported(device)) return GroupedGemmPath::kMma;
    kernels::GroupedGemmShape up;  // RunGroupedExperts' shapes (rows and experts do not matter here)
    up.num_experts = 1;
    up.n = gu0.out_features();
    up.k = gu0.in_features();
    up.ldx = up.k;
    up.ldy = up.n;
    kernels::GroupedGemmShape down = up;
    down.n = dn0.out_features();
    down.k = dn0.in_features();
    down.ldx = down.k;
    down.ldy = down.n;
    if (!kernels::GroupedGemmSm90Supports(up, false) || !kernels::GroupedGemmSm90Supports(down, true)) {
      return GroupedGemmPath::kMma;
    }
    if (!int4) return GroupedGemmPath::kSm90;
    return dequant ? GroupedGemmPath::kSm90Dequant : GroupedGemmPath::kMma;
  }

  static void TieTo(DeviceLinear* linear, const DeviceBuffer& table, int64_t vocab_size,
                    int64_t hidden_size) {
    linear->out_features_ = vocab_size;
    linear->in_features_ = hidden_size;
    linear->dense_ptr_ = table.data();
  }
};

namespace {

// Once a tensor is on the GPU its mmapped pages leave the process's RSS (they stay in the page cache), so
// host memory during the load stays near one layer's pages instead of growing to the checkpoint's size.
void ReleaseLinearPages(const TensorStore& store, const LinearWeight& w) {
  for (const TensorView* t : {&w.weight, &w.weight_packed, &w.weight_scale, &w.weight_zero_point,
                              &w.weight_g_idx, &w.weight_global_scale, &w.input_global_scale, &w.bias}) {
    store.ReleaseResidentPages(*t);
  }
}

void ReleaseLayerPages(const TensorStore& store, const LayerWeights& src) {
  for (const LinearWeight* w :
       {&src.q_proj, &src.k_proj, &src.v_proj, &src.o_proj, &src.gate_proj, &src.up_proj, &src.down_proj,
        &src.moe.router, &src.moe.shared_expert_gate, &src.moe.shared_expert.gate_proj,
        &src.moe.shared_expert.up_proj, &src.moe.shared_expert.down_proj}) {
    ReleaseLinearPages(store, *w);
  }
  for (const ExpertWeights& x : src.moe.experts) {
    for (const LinearWeight* w : {&x.gate_proj, &x.up_proj, &x.down_proj}) ReleaseLinearPages(store, *w);
  }
  for (const TensorView* t : {&src.input_layernorm, &src.post_attention_layernorm, &src.q_norm, &src.k_norm,
                              &src.pre_feedforward_layernorm, &src.post_feedforward_layernorm}) {
    if (t->present()) store.ReleaseResidentPages(*t);
  }
}

int64_t ResidentBytes(const DeviceModel& model) {
  int64_t bytes = model.embed.bytes() + model.final_norm.bytes() + model.rope_inv_freq.bytes() +
                  model.rope_inv_freq_long.bytes() + model.rope_inv_freq_local.bytes() +
                  model.lm_head.DeviceBytes();
  for (const DeviceLayer& layer : model.layers) {
    bytes += layer.input_norm.bytes() + layer.post_norm.bytes() + layer.q_norm.bytes() +
             layer.k_norm.bytes() + layer.qkv_bias.bytes() + layer.pre_ff_norm.bytes() +
             layer.post_ff_norm.bytes();
    for (const DeviceLinear* linear : LinearsInOrder(layer)) bytes += linear->DeviceBytes();
  }
  for (const DeviceBuffer& table : model.rotation_tables) bytes += table.bytes();
  return bytes;
}

// The RoPE frequencies: the model's (RopeInvFreq), longrope's long factors, the local layers' (Gemma 3), and
// longrope's attention factor.
absl::Status UploadRopeFrequencies(const ModelConfig& config, DeviceModel* model) {
  SCORED_ASSIGN_OR_RETURN(model->rope_inv_freq,
                          UploadFloats(RopeInvFreq(config), "the RoPE frequency table"));
  if (config.rope_scaling.type == RopeType::kLongrope) {
    SCORED_ASSIGN_OR_RETURN(model->rope_inv_freq_long,
                            UploadFloats(RopeInvFreqForLength(config, std::numeric_limits<int64_t>::max()),
                                         "the RoPE frequency table of long sequences"));
  }
  if (!config.layer_local_rope.empty()) {
    ModelConfig local = config;
    local.rope_theta = config.local_rope_theta;
    local.rope_scaling = config.local_rope_scaling;
    SCORED_ASSIGN_OR_RETURN(model->rope_inv_freq_local,
                            UploadFloats(RopeInvFreq(local), "the local layers' RoPE frequency table"));
  }
  model->rope_scaling = RopeAttentionScaling(config);
  return absl::OkStatus();
}

// A layer's norm weights: which optional ones exist follows the config's family flags (family.h).
absl::Status UploadLayerNorms(const ModelConfig& config, const LayerWeights& src, const std::string& prefix,
                              DeviceLayer* dst) {
  const bool offset = config.gemma_norm;
  SCORED_ASSIGN_OR_RETURN(dst->input_norm,
                          UploadNorm(src.input_layernorm, prefix + "input_layernorm", offset));
  SCORED_ASSIGN_OR_RETURN(
      dst->post_norm, UploadNorm(src.post_attention_layernorm, prefix + "post_attention_layernorm", offset));
  if (config.sandwich_norms) {
    SCORED_ASSIGN_OR_RETURN(dst->pre_ff_norm, UploadNorm(src.pre_feedforward_layernorm,
                                                         prefix + "pre_feedforward_layernorm", offset));
    SCORED_ASSIGN_OR_RETURN(dst->post_ff_norm, UploadNorm(src.post_feedforward_layernorm,
                                                          prefix + "post_feedforward_layernorm", offset));
  }
  if (config.qk_norm) {
    SCORED_ASSIGN_OR_RETURN(dst->q_norm, UploadNorm(src.q_norm, prefix + "self_attn.q_norm", offset));
    SCORED_ASSIGN_OR_RETURN(dst->k_norm, UploadNorm(src.k_norm, prefix + "self_attn.k_norm", offset));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<const DeviceLinear*> LinearsInOrder(const DeviceLayer& layer, bool skip_grouped_experts) {
  std::vector<const DeviceLinear*> order = {&layer.qkv, &layer.o};
  if (!layer.sparse) {
    order.push_back(&layer.gate_up);
    order.push_back(&layer.down);
    return order;
  }
  order.push_back(&layer.moe.router);
  const bool skip = skip_grouped_experts && layer.moe.grouped.enabled;
  for (size_t e = 0; !skip && e < layer.moe.gate_up.size(); ++e) {
    order.push_back(&layer.moe.gate_up[e]);
    order.push_back(&layer.moe.down[e]);
  }
  if (layer.moe.shared) {
    order.push_back(&layer.moe.shared_gate_up);
    order.push_back(&layer.moe.shared_down);
  }
  return order;
}

absl::StatusOr<std::unique_ptr<DeviceModel>> UploadModel(const ModelWeights& weights, ComputeDtype dtype,
                                                         const ShardPlan* plan, bool kv_cache_quant) {
  const ModelConfig& config = weights.config();
  auto model = std::make_unique<DeviceModel>();
  model->dtype = dtype;
  LinearCutter cut(plan);
  const TensorStore& store = weights.store();
  auto release = [&](const LinearWeight& w) { ReleaseLinearPages(store, w); };

  const int64_t vocab_rows = plan != nullptr ? plan->vocab_end - plan->vocab_begin : config.vocab_size;
  LinearWeight embed;
  embed.module = "model.embed_tokens";
  embed.out_features = vocab_rows;
  embed.in_features = config.hidden_size;
  if (plan != nullptr) {
    SCORED_ASSIGN_OR_RETURN(embed.weight, ShardEmbedding(weights.embed_tokens(), *plan));
  } else {
    embed.weight = weights.embed_tokens();
  }
  SCORED_ASSIGN_OR_RETURN(
      model->embed,
      DeviceBuffer::Allocate(vocab_rows * config.hidden_size * ElementBytes(dtype), "the token embedding"));
  SCORED_RETURN_IF_ERROR(UploadDenseInto(embed, dtype, model->embed.data()));
  store.ReleaseResidentPages(weights.embed_tokens());
  SCORED_ASSIGN_OR_RETURN(model->final_norm,
                          UploadNorm(weights.final_norm(), "model.norm.weight", config.gemma_norm));
  SCORED_RETURN_IF_ERROR(UploadRopeFrequencies(config, model.get()));
  RotationTables rotations;
  if (!weights.lm_head().transforms.empty()) {
    return absl::UnimplementedError(
        "lm_head: transform_config's rotations of the lm_head are not implemented on the CUDA backend; use "
        "--backend=cpu");
  }
  if (config.tie_word_embeddings) {
    DeviceModelLoader::TieTo(&model->lm_head, model->embed, vocab_rows, config.hidden_size);
  } else {
    SCORED_ASSIGN_OR_RETURN(const LinearWeight* head, cut.Cut(weights.lm_head(), LinearRole::kLmHead));
    SCORED_ASSIGN_OR_RETURN(model->lm_head, DeviceModelLoader::Build({head}, dtype, "lm_head", false,
                                                                     GemmTypes::kFp8ToFp32, false));
    SCORED_RETURN_IF_ERROR(DeviceModelLoader::MakeResident(&model->lm_head, dtype, "lm_head"));
    release(weights.lm_head());
    cut.Clear();
  }

  model->layers.resize(weights.layers().size());
  for (size_t l = 0; l < weights.layers().size(); ++l) {
    const LayerWeights& src = weights.layers()[l];
    DeviceLayer& dst = model->layers[l];
    const std::string prefix = absl::StrCat("model.layers.", l, ".");
    if (weights.kv_cache_fp8() && kv_cache_quant) {
      SCORED_RETURN_IF_ERROR(TensorToFloat(src.k_scale, &dst.k_scale, 1));
      SCORED_RETURN_IF_ERROR(TensorToFloat(src.v_scale, &dst.v_scale, 1));
    }
    // This layer's shards (host copies of row-parallel slices) live in `cut` until the end of the iteration.
    SCORED_ASSIGN_OR_RETURN(const LinearWeight* q, cut.Cut(src.q_proj, LinearRole::kQ));
    SCORED_ASSIGN_OR_RETURN(const LinearWeight* k, cut.Cut(src.k_proj, LinearRole::kK));
    SCORED_ASSIGN_OR_RETURN(const LinearWeight* v, cut.Cut(src.v_proj, LinearRole::kV));
    SCORED_ASSIGN_OR_RETURN(const LinearWeight* o, cut.Cut(src.o_proj, LinearRole::kO));
    const bool o_amax = cut.last_act_amax_all_reduce();
    dst.sparse = config.IsSparseLayer(static_cast<int64_t>(l));
    const LinearWeight *gate = nullptr, *up = nullptr, *down = nullptr;
    bool down_amax = false;
    if (!dst.sparse) {
      SCORED_ASSIGN_OR_RETURN(gate, cut.Cut(src.gate_proj, LinearRole::kGate));
      SCORED_ASSIGN_OR_RETURN(up, cut.Cut(src.up_proj, LinearRole::kUp));
      SCORED_ASSIGN_OR_RETURN(down, cut.Cut(src.down_proj, LinearRole::kDown));
      down_amax = cut.last_act_amax_all_reduce();
    }
    SCORED_RETURN_IF_ERROR(UploadLayerNorms(config, src, prefix, &dst));
    if (config.attention_bias) {
      const int64_t nq = q->out_features, nk = k->out_features, nv = v->out_features;
      std::vector<float> bias(nq + nk + nv);
      SCORED_RETURN_IF_ERROR(TensorToFloat(q->bias, bias.data(), nq));
      SCORED_RETURN_IF_ERROR(TensorToFloat(k->bias, bias.data() + nq, nk));
      SCORED_RETURN_IF_ERROR(TensorToFloat(v->bias, bias.data() + nq + nk, nv));
      SCORED_ASSIGN_OR_RETURN(dst.qkv_bias, UploadToDevice(bias.data(), static_cast<int64_t>(bias.size() * 4),
                                                           prefix + "self_attn q|k|v bias"));
    }
    SCORED_ASSIGN_OR_RETURN(dst.qkv, DeviceModelLoader::Build({q, k, v}, dtype, prefix + "self_attn q|k|v"));
    SCORED_ASSIGN_OR_RETURN(dst.o, DeviceModelLoader::Build({o}, dtype, prefix + "self_attn.o_proj", o_amax,
                                                            GemmTypes::kFp8ToFp32));
    // transform_config's online rotations: an output rotation runs after the GEMM only where the output is
    // written in the compute dtype with no bias to add after it (q|k|v without a bias, gate|up).
    SCORED_RETURN_IF_ERROR(
        rotations.Attach({q, k, v}, prefix + "self_attn q|k|v", !config.attention_bias, &dst.qkv));
    SCORED_RETURN_IF_ERROR(rotations.Attach({o}, prefix + "self_attn.o_proj", false, &dst.o));
    if (dst.sparse) {  // (BuildMoe clears `cut` expert by expert: q / k / v / o are not read after this)
      SCORED_RETURN_IF_ERROR(
          DeviceModelLoader::BuildMoe(config, src.moe, dtype, prefix, &cut, &rotations, &dst.moe));
    } else {
      SCORED_ASSIGN_OR_RETURN(dst.gate_up,
                              DeviceModelLoader::Build({gate, up}, dtype, prefix + "mlp gate|up"));
      SCORED_ASSIGN_OR_RETURN(dst.down, DeviceModelLoader::Build({down}, dtype, prefix + "mlp.down_proj",
                                                                 down_amax, GemmTypes::kFp8ToFp32));
      SCORED_RETURN_IF_ERROR(rotations.Attach({gate, up}, prefix + "mlp gate|up", true, &dst.gate_up));
      SCORED_RETURN_IF_ERROR(rotations.Attach({down}, prefix + "mlp.down_proj", false, &dst.down));
    }
    ReleaseLayerPages(store, src);
    cut.Clear();
    for (const DeviceLinear* linear : LinearsInOrder(dst, /*skip_grouped_experts=*/true)) {
      if (linear->uses_scratch()) {
        model->max_scratch_elements =
            std::max(model->max_scratch_elements, linear->out_features() * linear->in_features());
      }
      if (linear->fp8_resident() || linear->int8_resident()) {
        model->max_fp8_in_features = std::max(model->max_fp8_in_features, linear->in_features());
      }
    }
  }

  model->rotation_tables = rotations.Release();
  model->resident_bytes = ResidentBytes(*model);
  int sparse = 0, grouped = 0, grouped_int4 = 0, sm90 = 0, sm90_dequant = 0;
  for (const DeviceLayer& layer : model->layers) {
    sparse += layer.sparse ? 1 : 0;
    const bool on = layer.sparse && layer.moe.grouped.enabled;
    grouped += on ? 1 : 0;
    grouped_int4 += on && layer.moe.grouped.int4 ? 1 : 0;
    sm90 += on && layer.moe.grouped.path == GroupedGemmPath::kSm90 ? 1 : 0;
    sm90_dequant += on && layer.moe.grouped.path == GroupedGemmPath::kSm90Dequant ? 1 : 0;
  }
  if (sparse > 0) {  // which MoE path runs (DeviceMoe::grouped), for the benchmarks' and tests' logs
    SCORED_LOG(INFO) << "mixture of experts: " << grouped << " of " << sparse
                     << " sparse layers run their experts as grouped GEMMs (" << grouped_int4
                     << " from 4-bit weights; " << sm90 << " on the sm90 kernel, " << sm90_dequant
                     << " dequantized then sm90, the rest mma.sync), the rest one expert at a time";
  }
  return model;
}

int64_t EstimateDeviceBytes(const ModelWeights& weights, ComputeDtype dtype, int tp_size) {
  const ModelConfig& config = weights.config();
  const int64_t act = dtype == ComputeDtype::kBf16 ? 2 : 4;
  const auto linear_bytes = [act](const LinearWeight& w) {
    return w.format == WeightFormat::kDense ? w.NumElements() * act : w.StoredBytes();
  };
  int64_t bytes = config.vocab_size * config.hidden_size * act;  // the embedding
  if (!config.tie_word_embeddings) bytes += linear_bytes(weights.lm_head());
  for (const LayerWeights& layer : weights.layers()) {
    std::vector<const LinearWeight*> linears = {&layer.q_proj,
                                                &layer.k_proj,
                                                &layer.v_proj,
                                                &layer.o_proj,
                                                &layer.gate_proj,
                                                &layer.up_proj,
                                                &layer.down_proj,
                                                &layer.moe.router,
                                                &layer.moe.shared_expert_gate,
                                                &layer.moe.shared_expert.gate_proj,
                                                &layer.moe.shared_expert.up_proj,
                                                &layer.moe.shared_expert.down_proj};
    for (const ExpertWeights& x : layer.moe.experts) {
      for (const LinearWeight* w : {&x.gate_proj, &x.up_proj, &x.down_proj}) linears.push_back(w);
    }
    for (const LinearWeight* w : linears) {  // absent ones (a dense layer's MoE, a sparse one's MLP) count 0
      bytes += linear_bytes(*w) + w->out_features * 4;  // + an fp32 bias or per-channel scale at most
    }
    bytes += 4 * config.hidden_size * 4 + 2 * config.head_dim * 4;  // norms (Gemma: four per layer)
  }
  return bytes / std::max(tp_size, 1) + config.hidden_size * 4;
}

}  // namespace scored::cuda

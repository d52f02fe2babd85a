#include "engine/cuda/device_linear.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/cuda/gemm.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/int8_gemm.h"
#include "engine/kernels/kernel_types.h"
#include "engine/kernels/round_bf16.h"

namespace scored::cuda {

using kernels::bf16_t;

namespace {

DType StorageDType(ComputeDtype dtype) { return dtype == ComputeDtype::kBf16 ? DType::kBF16 : DType::kF32; }

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

// W8A8 resident in one byte per weight (FP8 E4M3 or int8): the members' weight bytes stacked along `out`
// into *weight ([out_features, in_features]), their scales widened to fp32 (exact) per output row into
// *scale ([out_features]; a tensor scale repeated over its module's rows).
absl::Status UploadResidentBytes(const std::vector<const LinearWeight*>& members, int64_t out_features,
                                 int64_t in_features, const std::string& what, DeviceBuffer* weight,
                                 DeviceBuffer* scale) {
  SCORED_ASSIGN_OR_RETURN(*weight, DeviceBuffer::Allocate(out_features * in_features, what));
  std::vector<float> scales(out_features);
  int64_t row = 0;
  for (const LinearWeight* m : members) {
    SCORED_CUDA_CHECK(cudaMemcpy(weight->as<uint8_t>() + row * in_features, m->weight.data,
                                 static_cast<size_t>(m->weight.nbytes), cudaMemcpyHostToDevice));
    const int64_t count = m->weight_scale.NumElements();
    SCORED_RETURN_IF_ERROR(TensorToFloat(m->weight_scale, scales.data() + row, count));
    for (int64_t r = count; r < m->out_features; ++r) scales[row + r] = scales[row];  // tensor scale
    row += m->out_features;
  }
  SCORED_ASSIGN_OR_RETURN(
      *scale,
      UploadToDevice(scales.data(), static_cast<int64_t>(scales.size() * sizeof(float)), what + " scales"));
  return absl::OkStatus();
}

}  // namespace

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

absl::StatusOr<DeviceLinear> DeviceModelLoader::Build(const std::vector<const LinearWeight*>& members,
                                                      ComputeDtype dtype, const std::string& what,
                                                      bool act_amax_all_reduce, GemmTypes fp8_types,
                                                      bool fp8_gemm) {
  DeviceLinear linear;
  linear.act_amax_all_reduce_ = act_amax_all_reduce;
  linear.in_features_ = members.front()->in_features;
  bool all_dense = true, any_w8a8 = false, all_w8a8 = true;
  const LinearWeight& first = *members.front();
  SCORED_RETURN_IF_ERROR(SetStaticActivations(members, what, &linear));
  for (const LinearWeight* m : members) {
    if (m->w8a8_dynamic_int8 != first.w8a8_dynamic_int8 ||
        (m->w8a8_dynamic_int8 && m->act_symmetric != first.act_symmetric)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": int8 activation quantization differs between the modules sharing one input"));
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
    SCORED_RETURN_IF_ERROR(UploadResidentBytes(members, linear.out_features_, linear.in_features_, what,
                                               &linear.fp8_weight_, &linear.fp8_scale_));
    return linear;
  }
  if (Int8GemmEligible(members, dtype, linear.out_features_, linear.in_features_)) {
    SCORED_RETURN_IF_ERROR(UploadResidentBytes(members, linear.out_features_, linear.in_features_, what,
                                               &linear.int8_weight_, &linear.int8_scale_));
    return linear;
  }
  for (const LinearWeight* m : members) {
    SCORED_ASSIGN_OR_RETURN(QuantizedPart part, UploadStored(*m, row));
    linear.parts_.push_back(std::move(part));
    row += m->out_features;
  }
  return linear;
}

absl::Status DeviceModelLoader::SetStaticActivations(const std::vector<const LinearWeight*>& members,
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

absl::Status DeviceModelLoader::MakeResident(DeviceLinear* linear, ComputeDtype dtype,
                                             const std::string& what) {
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

void DeviceModelLoader::TieTo(DeviceLinear* linear, const DeviceBuffer& table, int64_t vocab_size,
                              int64_t hidden_size) {
  linear->out_features_ = vocab_size;
  linear->in_features_ = hidden_size;
  linear->dense_ptr_ = table.data();
}

}  // namespace scored::cuda

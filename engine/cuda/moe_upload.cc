#include "engine/cuda/moe_upload.h"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/cuda/device_linear.h"
#include "engine/kernels/grouped_gemm.h"

namespace scored::cuda {

// The experts' side of the upload, a friend of DeviceLinear: BuildMoe's steps.
class MoeUploader {
 public:
  static absl::Status BuildMoe(const ExpertsPlan& plan, const MoeWeights& src, ComputeDtype dtype,
                               const std::string& prefix, const UploadOptions& options, LinearCutter* cut,
                               RotationTables* rotations, DeviceMoe* dst);
  // A linear the grouped GEMMs can read as it is: no activation quantization, rotations or FP8 / INT8
  // residency, the shape of expert 0's.
  static bool GroupedPlain(const DeviceLinear& l, const DeviceLinear& first);
  // A 4-bit pack-quantized linear (one or two stacked parts) as a GroupedInt4Expert, with its format; false
  // where the grouped kernel cannot read it (GroupedGemmInt4's limits).
  static bool GroupedInt4(const DeviceLinear& l, kernels::GroupedInt4Expert* ex,
                          kernels::GroupedInt4Format* f);
  // DeviceMoe::grouped: the experts' tables where every expert qualifies (GroupedExperts), else disabled.
  static absl::Status BuildGroupedExperts(ComputeDtype dtype, const UploadOptions& options, DeviceMoe* moe);
  // GroupedExperts::sm90_schedule: UploadOptions::moe_sm90_schedule.
  static absl::StatusOr<kernels::GroupedGemmSm90Schedule> ChooseSm90Schedule(MoeSm90Schedule choice);
  // GroupedExperts::path for a layer whose experts are grouped (UploadOptions::moe_gemm, the device, the
  // shapes).
  static absl::StatusOr<GroupedGemmPath> ChooseGroupedPath(MoeGemm choice, bool int4, const DeviceLinear& gu0,
                                                           const DeviceLinear& dn0);
};

absl::Status BuildMoe(const ExpertsPlan& plan, const MoeWeights& src, ComputeDtype dtype,
                      const std::string& prefix, const UploadOptions& options, LinearCutter* cut,
                      RotationTables* rotations, DeviceMoe* dst) {
  return MoeUploader::BuildMoe(plan, src, dtype, prefix, options, cut, rotations, dst);
}

absl::Status MoeUploader::BuildMoe(const ExpertsPlan& plan, const MoeWeights& src, ComputeDtype dtype,
                                   const std::string& prefix, const UploadOptions& options, LinearCutter* cut,
                                   RotationTables* rotations, DeviceMoe* dst) {
  const std::string mlp = prefix + "mlp.";
  dst->shared = plan.shared_expert();
  dst->shared_gated = dst->shared && plan.shared_expert_gated;
  std::vector<const LinearWeight*> router;
  SCORED_ASSIGN_OR_RETURN(router.emplace_back(), cut->Cut(src.router, LinearRole::kRouter));
  if (dst->shared_gated) {
    SCORED_ASSIGN_OR_RETURN(router.emplace_back(),
                            cut->Cut(src.shared_expert_gate, LinearRole::kSharedExpertGate));
  }
  if (plan.correction_bias) {  // widened to fp32 once, as the CPU oracle does
    std::vector<float> bias(static_cast<size_t>(plan.num_experts));
    SCORED_RETURN_IF_ERROR(TensorToFloat(src.correction_bias, bias.data(), plan.num_experts));
    SCORED_ASSIGN_OR_RETURN(dst->correction_bias,
                            UploadToDevice(bias.data(), static_cast<int64_t>(bias.size() * sizeof(float)),
                                           mlp + "gate.e_score_correction_bias"));
  }
  SCORED_ASSIGN_OR_RETURN(dst->router, DeviceModelLoader::Build(router, dtype, mlp + "gate (router)", false,
                                                                GemmTypes::kFp8ToFp32, false));
  for (const LinearWeight* w : router) {  // the experts read the router's input after it: not rotated
    if (!w->transforms.empty()) {
      return absl::UnimplementedError(absl::StrCat(w->module,
                                                   ": transform_config rotations of the router "
                                                   "are not implemented on the CUDA backend"));
    }
  }
  const auto expert = [&](const ExpertWeights& x, bool shared, const std::string& what, DeviceLinear* gate_up,
                          DeviceLinear* down) -> absl::Status {
    SCORED_ASSIGN_OR_RETURN(
        const LinearWeight* gate,
        cut->Cut(x.gate_proj, shared ? LinearRole::kSharedGate : LinearRole::kExpertGate));
    SCORED_ASSIGN_OR_RETURN(const LinearWeight* up,
                            cut->Cut(x.up_proj, shared ? LinearRole::kSharedUp : LinearRole::kExpertUp));
    SCORED_ASSIGN_OR_RETURN(const LinearWeight* dn, cut->Cut(x.down_proj, shared ? LinearRole::kSharedDown
                                                                                 : LinearRole::kExpertDown));
    const bool down_amax = cut->last_act_amax_all_reduce();
    SCORED_ASSIGN_OR_RETURN(*gate_up, DeviceModelLoader::Build({gate, up}, dtype, what + " gate|up"));
    SCORED_ASSIGN_OR_RETURN(
        *down, DeviceModelLoader::Build({dn}, dtype, what + ".down_proj", down_amax, GemmTypes::kFp8ToFp32));
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
  return BuildGroupedExperts(dtype, options, dst);
}

bool MoeUploader::GroupedPlain(const DeviceLinear& l, const DeviceLinear& first) {
  return !l.w8a8_ && !l.w8a8_int8_ && l.static_act_ == DeviceLinear::StaticAct::kNone &&
         l.input_rotations_.empty() && l.output_rotations_.empty() && !l.fp8_resident() &&
         !l.int8_resident() && l.out_features_ == first.out_features_ && l.in_features_ == first.in_features_;
}

bool MoeUploader::GroupedInt4(const DeviceLinear& l, kernels::GroupedInt4Expert* ex,
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
        (!p.symmetric &&
         (p.zero_point == nullptr || p.zero_point_dtype != DType::kI32 || p.zero_point_cols != scale_cols)) ||
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

absl::Status MoeUploader::BuildGroupedExperts(ComputeDtype dtype, const UploadOptions& options,
                                              DeviceMoe* moe) {
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
    if (!GroupedInt4(gu, &int4_gu[e], &f_gu) || !GroupedInt4(dn, &int4_dn[e], &f_dn)) return absl::OkStatus();
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
    SCORED_ASSIGN_OR_RETURN(g.gate_up,
                            UploadToDevice(int4_gu.data(), bytes, "the grouped 4-bit gate|up weight table"));
    SCORED_ASSIGN_OR_RETURN(g.down,
                            UploadToDevice(int4_dn.data(), bytes, "the grouped 4-bit down weight table"));
    g.int4 = true;
    g.gate_up_format = gu_format;
    g.down_format = dn_format;
  } else {
    return absl::OkStatus();  // some experts dense, some quantized, or an int4 k not a multiple of 32
  }
  SCORED_ASSIGN_OR_RETURN(g.path, ChooseGroupedPath(options.moe_gemm, g.int4, gu0, dn0));
  SCORED_ASSIGN_OR_RETURN(g.sm90_schedule, ChooseSm90Schedule(options.moe_sm90_schedule));
  g.enabled = true;
  moe->grouped = std::move(g);
  return absl::OkStatus();
}

absl::StatusOr<kernels::GroupedGemmSm90Schedule> MoeUploader::ChooseSm90Schedule(MoeSm90Schedule choice) {
  switch (choice) {
    case MoeSm90Schedule::kCooperative:
      return kernels::GroupedGemmSm90Schedule::kCooperative;
    case MoeSm90Schedule::kCooperative2x1:
      return kernels::GroupedGemmSm90Schedule::kCooperative2x1;
    case MoeSm90Schedule::kPingpong:
      return kernels::GroupedGemmSm90Schedule::kPingpong;
  }
  return absl::InvalidArgumentError(absl::StrCat("--moe_sm90_schedule ", static_cast<int>(choice),
                                                 ": want cooperative, cooperative2x1 or pingpong"));
}

absl::StatusOr<GroupedGemmPath> MoeUploader::ChooseGroupedPath(MoeGemm choice, bool int4,
                                                               const DeviceLinear& gu0,
                                                               const DeviceLinear& dn0) {
  if (choice == MoeGemm::kMma) return GroupedGemmPath::kMma;
  if (choice != MoeGemm::kSm90 && choice != MoeGemm::kSm90Dequant) {
    return absl::InvalidArgumentError(
        absl::StrCat("--moe_gemm ", static_cast<int>(choice), ": want mma, sm90 or sm90_dequant"));
  }
  const bool dequant = choice == MoeGemm::kSm90Dequant;
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

}  // namespace scored::cuda

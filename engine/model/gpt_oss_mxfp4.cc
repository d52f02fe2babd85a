#include "engine/model/gpt_oss_mxfp4.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/base/json_util.h"
#include "engine/base/status_macros.h"
#include "engine/model/tensor_checks.h"

namespace scored {
namespace {

constexpr int64_t kGroup = 32;               // FP4 values per E8M0 scale
constexpr int64_t kBlockBytes = kGroup / 2;  // bytes of one group's FP4 values (two per byte)

// `t` is present, U8, of shape `shape`, and its byte count is its element count (a view made by hand, not
// by the safetensors reader, could disagree; every later read trusts the shape).
absl::Status CheckTensor(const std::string& module, const char* role, const TensorView& t,
                         const std::vector<int64_t>& shape) {
  if (!t.present()) {
    return absl::InvalidArgumentError(
        absl::StrCat(module, ": gpt-oss MXFP4 experts: ", role, " (tensor '", t.name, "') is absent"));
  }
  SCORED_RETURN_IF_ERROR(CheckDType(t, {DType::kU8}));
  if (t.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(t.file, ": tensor '", t.name, "' has shape ",
                                                   ShapeString(t.shape), ", expected ", ShapeString(shape),
                                                   " (gpt-oss MXFP4 ", role, ")"));
  }
  if (t.nbytes != t.NumElements()) {
    return absl::InvalidArgumentError(absl::StrCat(t.file, ": tensor '", t.name, "' holds ", t.nbytes,
                                                   " bytes, its shape ", ShapeString(t.shape), " ",
                                                   t.NumElements()));
  }
  return absl::OkStatus();
}

// The loader's E8M0 check (tensor_checks.h CheckE8M0Scales), over a whole scales tensor: its message and
// the flat index into the checkpoint's tensor are what a compressed-tensors mxfp4 linear would report.
absl::Status CheckScales(const TensorView& scales) {
  LinearWeight whole;
  whole.format = WeightFormat::kMxfp4PackQuantized;
  whole.weight_scale = scales;
  return CheckE8M0Scales(whole);
}

// A U8 [rows, cols] view of `data`, which lies in `from`'s storage or in a copy of part of it.
TensorView MatrixView(const TensorView& from, std::string name, int64_t rows, int64_t cols,
                      const uint8_t* data) {
  TensorView t;
  t.name = std::move(name);
  t.dtype = DType::kU8;
  t.shape = {rows, cols};
  t.data = data;
  t.nbytes = rows * cols;
  t.file = from.file;
  return t;
}

// Rows `half`, half + 2, half + 4, ... of each of the num_experts matrices [2 * rows, row_bytes] that
// `from` holds back to back, copied into a new buffer [num_experts, rows, row_bytes] appended to `buffers`.
const uint8_t* EveryOtherRow(const TensorView& from, int64_t num_experts, int64_t rows, int64_t row_bytes,
                             int64_t half, TranscodedBuffers* buffers) {
  buffers->push_back(
      std::make_unique<std::vector<uint8_t>>(static_cast<size_t>(num_experts * rows * row_bytes)));
  uint8_t* dst = buffers->back()->data();
  for (int64_t e = 0; e < num_experts; ++e) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t src_row = e * 2 * rows + 2 * r + half;
      std::memcpy(dst + (e * rows + r) * row_bytes, from.data + src_row * row_bytes, row_bytes);
    }
  }
  return dst;
}

// An empty kMxfp4PackQuantized linear [out, in] named `module`: the quantization parameters
// compressed-tensors' mxfp4-pack-quantized scheme gives it (compressed_tensors.cc BuildScheme).
LinearWeight Mxfp4Linear(std::string module, int64_t out, int64_t in) {
  LinearWeight w;
  w.module = std::move(module);
  w.out_features = out;
  w.in_features = in;
  w.format = WeightFormat::kMxfp4PackQuantized;
  w.num_bits = 4;
  w.symmetric = true;
  w.strategy = QuantStrategy::kGroup;
  w.group_size = kGroup;
  return w;
}

// Every refusal of SplitGptOssMxfp4Experts (gpt_oss_mxfp4.h), before anything is copied.
absl::Status CheckArguments(const GptOssMxfp4Tensors& t, int64_t num_experts, int64_t intermediate_size,
                            int64_t hidden_size) {
  if (num_experts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.module, ": gpt-oss MXFP4 experts: num_experts ", num_experts, " < 1"));
  }
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"intermediate_size", intermediate_size},
                                    std::pair<const char*, int64_t>{"hidden_size", hidden_size}}) {
    if (value < kGroup || value % kGroup != 0) {
      return absl::InvalidArgumentError(absl::StrCat(t.module, ": gpt-oss MXFP4 experts: ", name, " ", value,
                                                     " is not a positive multiple of ", kGroup));
    }
  }
  const int64_t E = num_experts, I = intermediate_size, H = hidden_size;
  SCORED_RETURN_IF_ERROR(
      CheckTensor(t.module, "gate_up_proj_blocks", t.gate_up_blocks, {E, 2 * I, H / kGroup, kBlockBytes}));
  SCORED_RETURN_IF_ERROR(
      CheckTensor(t.module, "gate_up_proj_scales", t.gate_up_scales, {E, 2 * I, H / kGroup}));
  SCORED_RETURN_IF_ERROR(
      CheckTensor(t.module, "down_proj_blocks", t.down_blocks, {E, H, I / kGroup, kBlockBytes}));
  SCORED_RETURN_IF_ERROR(CheckTensor(t.module, "down_proj_scales", t.down_scales, {E, H, I / kGroup}));
  SCORED_RETURN_IF_ERROR(CheckScales(t.gate_up_scales));
  return CheckScales(t.down_scales);
}

}  // namespace

bool IsGptOssMxfp4Config(std::string_view quantization_config_json) {
  const json_util::Json j =
      json_util::Json::parse(quantization_config_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  const json_util::Json* m = json_util::Find(j, "quant_method");
  return m != nullptr && m->is_string() && absl::AsciiStrToLower(m->get<std::string>()) == "mxfp4";
}

absl::StatusOr<GptOssMxfp4Tensors> GetGptOssMxfp4Tensors(const TensorStore& store,
                                                         const std::string& experts_module) {
  GptOssMxfp4Tensors t;
  t.module = experts_module;
  const std::string p = experts_module + ".";
  SCORED_ASSIGN_OR_RETURN(t.gate_up_blocks, store.Get(p + "gate_up_proj_blocks"));
  SCORED_ASSIGN_OR_RETURN(t.gate_up_scales, store.Get(p + "gate_up_proj_scales"));
  SCORED_ASSIGN_OR_RETURN(t.down_blocks, store.Get(p + "down_proj_blocks"));
  SCORED_ASSIGN_OR_RETURN(t.down_scales, store.Get(p + "down_proj_scales"));
  return t;
}

absl::StatusOr<std::vector<ExpertWeights>> SplitGptOssMxfp4Experts(const GptOssMxfp4Tensors& tensors,
                                                                   int64_t num_experts,
                                                                   int64_t intermediate_size,
                                                                   int64_t hidden_size,
                                                                   TranscodedBuffers* buffers) {
  SCORED_RETURN_IF_ERROR(CheckArguments(tensors, num_experts, intermediate_size, hidden_size));
  const int64_t E = num_experts, I = intermediate_size, H = hidden_size;
  // Bytes per row: FP4 values of a gate / up row (H inputs) and of a down row (I inputs), and their scales.
  const int64_t gu_bytes = H / 2, gu_scales = H / kGroup, down_bytes = I / 2, down_scales = I / kGroup;
  const TensorView& gub = tensors.gate_up_blocks;
  const TensorView& gus = tensors.gate_up_scales;
  const uint8_t* halves[2][2];  // [gate, up][packed, scales], each [E, I, row bytes]
  for (int64_t half = 0; half < 2; ++half) {
    halves[half][0] = EveryOtherRow(gub, E, I, gu_bytes, half, buffers);
    halves[half][1] = EveryOtherRow(gus, E, I, gu_scales, half, buffers);
  }
  std::vector<ExpertWeights> experts(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    const std::string m = absl::StrCat(tensors.module, ".", e, ".");
    ExpertWeights& x = experts[static_cast<size_t>(e)];
    LinearWeight* gate_up[2] = {&x.gate_proj, &x.up_proj};
    for (int64_t half = 0; half < 2; ++half) {
      LinearWeight& w = *gate_up[half];
      w = Mxfp4Linear(m + (half == 0 ? "gate_proj" : "up_proj"), I, H);
      const std::string rows = absl::StrCat("[", e, ", ", half, "::2]");
      w.weight_packed = MatrixView(gub, gub.name + rows, I, gu_bytes, halves[half][0] + e * I * gu_bytes);
      w.weight_scale = MatrixView(gus, gus.name + rows, I, gu_scales, halves[half][1] + e * I * gu_scales);
    }
    const std::string slice = absl::StrCat("[", e, "]");
    x.down_proj = Mxfp4Linear(m + "down_proj", H, I);
    x.down_proj.weight_packed = MatrixView(tensors.down_blocks, tensors.down_blocks.name + slice, H,
                                           down_bytes, tensors.down_blocks.data + e * H * down_bytes);
    x.down_proj.weight_scale = MatrixView(tensors.down_scales, tensors.down_scales.name + slice, H,
                                          down_scales, tensors.down_scales.data + e * H * down_scales);
  }
  return experts;
}

}  // namespace scored

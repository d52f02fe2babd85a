#include "engine/model/gpt_oss_experts.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/base/dtype.h"
#include "engine/base/status_macros.h"
#include "engine/model/tensor_checks.h"

namespace scored {
namespace {

absl::Status CheckFloatTensor(const TensorView& t, const char* role, const std::vector<int64_t>& shape) {
  SCORED_RETURN_IF_ERROR(CheckDType(t, {DType::kF32, DType::kF16, DType::kBF16}));
  if (t.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(t.file, ": tensor '", t.name, "' has shape ",
                                                   ShapeString(t.shape), ", expected ", ShapeString(shape),
                                                   " (gpt-oss ", role, ")"));
  }
  return absl::OkStatus();
}

// A view of `data` as a [rows, cols] (or [cols] when rows is 0) tensor of from's dtype and file.
TensorView ViewOf(const TensorView& from, std::string name, int64_t rows, int64_t cols, const uint8_t* data) {
  TensorView t;
  t.name = std::move(name);
  t.dtype = from.dtype;
  t.shape = rows > 0 ? std::vector<int64_t>{rows, cols} : std::vector<int64_t>{cols};
  t.data = data;
  t.nbytes = (rows > 0 ? rows : 1) * cols * DTypeSize(from.dtype);
  t.file = from.file;
  return t;
}

LinearWeight DenseLinear(std::string module, const TensorView& weight) {
  LinearWeight w;
  w.module = std::move(module);
  w.out_features = weight.shape[0];
  w.in_features = weight.shape[1];
  w.format = WeightFormat::kDense;
  w.weight = weight;
  return w;
}

// The transposes of the num_experts matrices [rows, cols] of `from` (columns col0, col0 + stride, ... of
// each: cols_out of them) into a new buffer [num_experts, cols_out, rows] appended to `buffers`.
const uint8_t* TransposedColumns(const TensorView& from, int64_t num_experts, int64_t rows, int64_t cols,
                                 int64_t col0, int64_t stride, int64_t cols_out, TranscodedBuffers* buffers) {
  const int64_t elem = DTypeSize(from.dtype);
  buffers->push_back(
      std::make_unique<std::vector<uint8_t>>(static_cast<size_t>(num_experts * cols_out * rows * elem)));
  uint8_t* dst = buffers->back()->data();
  for (int64_t e = 0; e < num_experts; ++e) {
    const uint8_t* src = from.data + e * rows * cols * elem;
    uint8_t* out = dst + e * cols_out * rows * elem;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols_out; ++c) {
        std::memcpy(out + (c * rows + r) * elem, src + (r * cols + col0 + c * stride) * elem, elem);
      }
    }
  }
  return dst;
}

}  // namespace

absl::StatusOr<std::vector<ExpertWeights>> SplitGptOssDenseExperts(
    const std::string& experts_module, const TensorView& gate_up, const TensorView& down, int64_t num_experts,
    int64_t intermediate_size, int64_t hidden_size, TranscodedBuffers* buffers) {
  const int64_t E = num_experts, I = intermediate_size, H = hidden_size;
  SCORED_RETURN_IF_ERROR(CheckFloatTensor(gate_up, "experts' gate_up_proj", {E, H, 2 * I}));
  SCORED_RETURN_IF_ERROR(CheckFloatTensor(down, "experts' down_proj", {E, I, H}));
  if (gate_up.dtype != down.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(down.file, ": gpt-oss expert tensors '", gate_up.name,
                                                   "' (", DTypeName(gate_up.dtype), ") and '", down.name,
                                                   "' (", DTypeName(down.dtype), ") differ in dtype"));
  }
  const int64_t elem = DTypeSize(gate_up.dtype);
  const uint8_t* gate = TransposedColumns(gate_up, E, H, 2 * I, 0, 2, I, buffers);  // [E, I, H]
  const uint8_t* up = TransposedColumns(gate_up, E, H, 2 * I, 1, 2, I, buffers);    // [E, I, H]
  const uint8_t* dn = TransposedColumns(down, E, I, H, 0, 1, H, buffers);           // [E, H, I]
  std::vector<ExpertWeights> experts(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    const std::string m = absl::StrCat(experts_module, ".", e, ".");
    const std::string gu = absl::StrCat(gate_up.name, "[", e, "]");
    ExpertWeights& x = experts[static_cast<size_t>(e)];
    x.gate_proj =
        DenseLinear(m + "gate_proj", ViewOf(gate_up, gu + "[:, 0::2]^T", I, H, gate + e * I * H * elem));
    x.up_proj = DenseLinear(m + "up_proj", ViewOf(gate_up, gu + "[:, 1::2]^T", I, H, up + e * I * H * elem));
    x.down_proj = DenseLinear(
        m + "down_proj", ViewOf(down, absl::StrCat(down.name, "[", e, "]^T"), H, I, dn + e * H * I * elem));
  }
  return experts;
}

absl::Status SetGptOssExpertBiases(const TensorView& gate_up_bias, const TensorView& down_bias,
                                   int64_t intermediate_size, int64_t hidden_size,
                                   std::vector<ExpertWeights>* experts, TranscodedBuffers* buffers) {
  const int64_t E = static_cast<int64_t>(experts->size()), I = intermediate_size, H = hidden_size;
  SCORED_RETURN_IF_ERROR(CheckFloatTensor(gate_up_bias, "experts' gate_up_proj_bias", {E, 2 * I}));
  SCORED_RETURN_IF_ERROR(CheckFloatTensor(down_bias, "experts' down_proj_bias", {E, H}));
  const int64_t gelem = DTypeSize(gate_up_bias.dtype), delem = DTypeSize(down_bias.dtype);
  // [E, 2I] read as E matrices [I, 2] whose columns 0 and 1 are the gate and up biases.
  const uint8_t* halves[2] = {TransposedColumns(gate_up_bias, E, I, 2, 0, 1, 1, buffers),
                              TransposedColumns(gate_up_bias, E, I, 2, 1, 1, 1, buffers)};
  for (int64_t e = 0; e < E; ++e) {
    ExpertWeights& x = (*experts)[static_cast<size_t>(e)];
    for (int half = 0; half < 2; ++half) {
      (half == 0 ? x.gate_proj : x.up_proj).bias =
          ViewOf(gate_up_bias, absl::StrCat(gate_up_bias.name, "[", e, ", ", half, "::2]"), 0, I,
                 halves[half] + e * I * gelem);
    }
    x.down_proj.bias =
        ViewOf(down_bias, absl::StrCat(down_bias.name, "[", e, "]"), 0, H, down_bias.data + e * H * delem);
  }
  return absl::OkStatus();
}

}  // namespace scored

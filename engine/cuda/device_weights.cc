#include "engine/cuda/device_weights.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace scored::cuda {

UploadOptions UploadOptionsFor(const EngineOptions& options) {
  UploadOptions upload;
  upload.kv_cache_quant = options.kv_cache_quant;
  upload.moe_gemm = options.moe_gemm;
  upload.moe_sm90_schedule = options.moe_sm90_schedule;
  return upload;
}

const char* MoeGemmName(MoeGemm choice) {
  switch (choice) {
    case MoeGemm::kMma:
      return "mma";
    case MoeGemm::kSm90:
      return "sm90";
    case MoeGemm::kSm90Dequant:
      return "sm90_dequant";
  }
  return "?";
}

const char* MoeSm90ScheduleName(MoeSm90Schedule choice) {
  switch (choice) {
    case MoeSm90Schedule::kCooperative:
      return "cooperative";
    case MoeSm90Schedule::kCooperative2x1:
      return "cooperative2x1";
    case MoeSm90Schedule::kPingpong:
      return "pingpong";
  }
  return "?";
}

std::vector<const DeviceLinear*> LinearsInOrder(const DeviceLayer& layer, bool skip_grouped_experts) {
  const bool skip = skip_grouped_experts && layer.moe.grouped.enabled;
  std::vector<const DeviceLinear*> order;
  ForEachLinear(layer, [&](const DeviceLinear& linear, DeviceLinearRole role) {
    if (!(skip && IsRoutedExpert(role))) order.push_back(&linear);
  });
  return order;
}

std::string GroupedExpertsNote(const DeviceModel& model) {
  int sparse = 0, grouped = 0, grouped_int4 = 0, sm90 = 0, sm90_dequant = 0;
  for (const DeviceLayer& layer : model.layers) {
    sparse += layer.sparse ? 1 : 0;
    const bool on = layer.sparse && layer.moe.grouped.enabled;
    grouped += on ? 1 : 0;
    grouped_int4 += on && layer.moe.grouped.int4 ? 1 : 0;
    sm90 += on && layer.moe.grouped.path == GroupedGemmPath::kSm90 ? 1 : 0;
    sm90_dequant += on && layer.moe.grouped.path == GroupedGemmPath::kSm90Dequant ? 1 : 0;
  }
  if (sparse == 0) return "";
  return absl::StrCat(
      grouped, " of ", sparse, " sparse layers run their experts as grouped GEMMs (", grouped_int4,
      " from 4-bit weights; ", sm90, " on the sm90 kernel, ", sm90_dequant,
      " dequantized then sm90, the rest mma.sync), the rest one expert at a time (--moe_gemm=",
      MoeGemmName(model.options.moe_gemm),
      " --moe_sm90_schedule=", MoeSm90ScheduleName(model.options.moe_sm90_schedule), ")");
}

}  // namespace scored::cuda

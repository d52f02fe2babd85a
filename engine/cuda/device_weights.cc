#include "engine/cuda/device_weights.h"

#include <vector>

namespace scored::cuda {

std::vector<const DeviceLinear*> LinearsInOrder(const DeviceLayer& layer, bool skip_grouped_experts) {
  const bool skip = skip_grouped_experts && layer.moe.grouped.enabled;
  std::vector<const DeviceLinear*> order;
  ForEachLinear(layer, [&](const DeviceLinear& linear, DeviceLinearRole role) {
    if (!(skip && IsRoutedExpert(role))) order.push_back(&linear);
  });
  return order;
}

}  // namespace scored::cuda

#include "engine/cuda/device_weights.h"

#include <vector>

namespace scored::cuda {

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

}  // namespace scored::cuda

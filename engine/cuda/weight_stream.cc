#include "engine/cuda/weight_stream.h"

#include <vector>

#include "engine/base/status_macros.h"
#include "engine/kernels/cuda_check.h"

namespace scored::cuda {

std::vector<const DeviceLinear*> WeightStream::Order(const DeviceModel& model) {
  std::vector<const DeviceLinear*> order;
  for (const DeviceLayer& layer : model.layers) {
    for (const DeviceLinear* l : LinearsInOrder(layer, /*skip_grouped_experts=*/true)) order.push_back(l);
  }
  return order;
}

WeightStream::WeightStream(const DeviceModel& model, const WeightScratch& scratch, cudaStream_t stream)
    : dtype_(model.dtype),
      quantized_(model.max_scratch_elements > 0),
      scratch_(scratch),
      stream_(stream),
      order_(Order(model)) {}

absl::Status WeightStream::Start() {
  if (!quantized_) return absl::OkStatus();
  for (const cudaEvent_t e : scratch_.free) SCORED_CUDA_CHECK(cudaEventRecord(e, stream_));
  SCORED_RETURN_IF_ERROR(Prefetch(0));
  return Prefetch(1);
}

absl::Status WeightStream::Prefetch(size_t k) {
  if (!quantized_ || k >= order_.size() || !order_[k]->uses_scratch()) return absl::OkStatus();
  const int buf = static_cast<int>(k % 2);
  SCORED_CUDA_CHECK(cudaStreamWaitEvent(scratch_.dequant_stream, scratch_.free[buf], 0));
  SCORED_RETURN_IF_ERROR(
      order_[k]->Materialize(dtype_, scratch_.buffer[buf], scratch_.dequant_stream).status());
  SCORED_CUDA_CHECK(cudaEventRecord(scratch_.ready[buf], scratch_.dequant_stream));
  return absl::OkStatus();
}

absl::StatusOr<WeightStream::Lease> WeightStream::Acquire(const DeviceLinear& linear) {
  if (next_ >= order_.size() || order_[next_] != &linear) {
    return absl::InternalError("linears used out of order");
  }
  Lease lease{&linear, nullptr, next_++};
  if (linear.resident_dense()) {
    SCORED_ASSIGN_OR_RETURN(lease.weight, linear.Materialize(dtype_, nullptr, stream_));
  } else if (linear.uses_scratch()) {
    SCORED_CUDA_CHECK(cudaStreamWaitEvent(stream_, scratch_.ready[lease.index % 2], 0));
    lease.weight = scratch_.buffer[lease.index % 2];
  }
  return lease;
}

absl::Status WeightStream::Release(const Lease& lease) {
  if (lease.linear->uses_scratch())
    SCORED_CUDA_CHECK(cudaEventRecord(scratch_.free[lease.index % 2], stream_));
  return Prefetch(lease.index + 2);
}

}  // namespace scored::cuda

// The weights of a forward's linears, one linear at a time: resident ones as they are, quantized ones
// (DeviceLinear::uses_scratch) expanded ahead of use into two scratch buffers taken in turn.
//
// How: every linear of the forward in the order of first use (Order: per layer q|k|v, o, gate|up, down).
// Linear k is expanded into scratch[k % 2] on the dequant stream, two linears ahead: linear k+2's expansion
// (into the buffer linear k used) is enqueued once linear k's last GEMM is (Release), and overlaps linear k+1
// and the ops around it. Events order the two streams: ready[i] (recorded on the dequant stream after the
// expansion into buffer i; the forward's stream waits for it in Acquire) and free[i] (recorded on the
// forward's stream after the last GEMM that reads buffer i, in Release; the dequant stream waits for it
// before it overwrites buffer i). Two linears are in use at a time (q|k|v and o, then gate|up and down, their
// row chunks interleaved).
//
// Contract: Start once, then Acquire every linear of Order() in that order, each before its first GEMM, and
// Release it after its last GEMM is enqueued; Acquire out of order is INTERNAL. Releases may lag acquires by
// one (acquire k, acquire k+1, release k, ...). CUDA errors are returned as statuses. All work is
// asynchronous: nothing here waits on the host.
// Ownership: the scratch buffers, stream and events are borrowed (Activations owns them) and must outlive
// the WeightStream; one WeightStream per forward. Thread-safety: none (the forward's thread).
#ifndef SCORED_ENGINE_CUDA_WEIGHT_STREAM_H_
#define SCORED_ENGINE_CUDA_WEIGHT_STREAM_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/cuda/device_weights.h"

namespace scored::cuda {

// The device resources a WeightStream streams through (borrowed; unused for a model without quantized
// linears, DeviceModel::max_scratch_elements == 0).
struct WeightScratch {
  void* buffer[2] = {nullptr, nullptr};       // [max_scratch_elements] compute dtype each
  cudaStream_t dequant_stream = nullptr;      // where the expansions run
  cudaEvent_t ready[2] = {nullptr, nullptr};  // buffer i holds its linear's weight
  cudaEvent_t free[2] = {nullptr, nullptr};   // buffer i's last GEMM is done
};

class WeightStream {
 public:
  // A linear in use, from Acquire to Release.
  struct Lease {
    const DeviceLinear* linear = nullptr;
    // [out_features, in_features] compute dtype for the GEMMs: the resident matrix, scratch.buffer[index % 2]
    // for a quantized linear, null for a resident FP8 linear (its GEMMs read fp8_weight()).
    const void* weight = nullptr;
    size_t index = 0;  // its place in Order()
  };

  // Every linear of the forward in the order of first use: per layer q|k|v, o, gate|up, down
  // (LinearsInOrder; a sparse layer's experts left out where they run as grouped GEMMs, DeviceMoe::grouped).
  static std::vector<const DeviceLinear*> Order(const DeviceModel& model);

  // `model` and `scratch` must outlive this object; `stream` is the forward's stream (the GEMMs').
  WeightStream(const DeviceModel& model, const WeightScratch& scratch, cudaStream_t stream);

  // Quantized models: both buffers are free once everything enqueued on the forward's stream so far is done
  // (free[0], free[1] recorded there); enqueues the expansions of the first two linears. Nothing otherwise.
  absl::Status Start();

  // The next linear of Order(), which must be `linear` (else INTERNAL "linears used out of order"). A
  // quantized linear: the forward's stream waits for its expansion (ready[index % 2]).
  absl::StatusOr<Lease> Acquire(const DeviceLinear& linear);

  // After the lease's last GEMM is enqueued: its buffer is free (free[index % 2] recorded on the forward's
  // stream) and the expansion of linear index + 2 into it is enqueued.
  absl::Status Release(const Lease& lease);

 private:
  // Enqueues the expansion of order_[k] into buffer k % 2 (nothing for a resident dense or FP8 linear, or
  // past the last linear).
  absl::Status Prefetch(size_t k);

  ComputeDtype dtype_;
  bool quantized_;  // any linear uses the scratch (model.max_scratch_elements > 0)
  WeightScratch scratch_;
  cudaStream_t stream_;
  std::vector<const DeviceLinear*> order_;
  size_t next_ = 0;  // index into order_ of the next linear to acquire
};

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_WEIGHT_STREAM_H_

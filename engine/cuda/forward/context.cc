#include "engine/cuda/forward/context.h"

#include <algorithm>

#include "engine/base/status_macros.h"
#include "engine/dist/nccl_communicator.h"
#include "engine/kernels/kernel_types.h"

namespace scored::cuda {

bool Sandwiched(const ModelPlan& plan) {
  return std::any_of(plan.layers.begin(), plan.layers.end(), [](const LayerPlan& l) { return l.sandwich(); });
}

bool Chunkable(const ModelPlan& plan, const DeviceModel& model) {
  if (Sandwiched(plan) || plan.any_experts()) return false;
  bool chunkable = true;  // every layer dense here: its q|k|v, o, gate|up and down
  for (const DeviceLayer& layer : model.layers) {
    ForEachLinear(layer, [&chunkable](const DeviceLinear& w, DeviceLinearRole) {
      if ((w.fp8_resident() || w.w8a8_dynamic_fp8() || w.w8a8_dynamic_int8()) && w.act_amax_all_reduce()) {
        chunkable = false;
      }
    });
  }
  return chunkable;
}

template <typename T>
ForwardContext<T>::ForwardContext(const ModelConfig& config, const DeviceModel& model, GemmRunner& gemm,
                                  const ForwardBatch& batch, Activations* acts, cudaStream_t stream,
                                  const TensorParallelContext* tp, PassRole role,
                                  const BaselineModel* reference)
    : config(config),
      model(model),
      gemm(gemm),
      batch(batch),
      acts(acts),
      stream(stream),
      tp(tp),
      role(role),
      reference(reference),
      plan(PlanModel(config)),
      sandwich(Sandwiched(plan)),
      ref_final_logit_softcap(reference != nullptr ? PlanModel(*reference->config).final_logit_softcap
                                                   : 0.0f),
      add_to_residual(tp == nullptr || tp->comm->rank() == 0),
      chunks(RowChunks(batch.cu_seqlens, batch.num_tokens, batch.num_seqs, batch.max_seqlen,
                       acts->tp_row_chunks, tp != nullptr && Chunkable(plan, model))),
      weights(model, acts->weight_scratch(), stream),
      sums(tp, acts, static_cast<int>(chunks.size()), config.hidden_size, stream),
      linears(gemm, acts, tp, model.dtype, stream),
      clock(acts->stage_times, stream),
      residual_stream(*this, sandwich ? ResidualForm::kSandwich : ResidualForm::kPreNorm) {}

absl::StatusOr<ChunkLease> ChunkLease::Acquire(WeightStream& weights, const DeviceLinear& linear,
                                               int num_chunks) {
  SCORED_ASSIGN_OR_RETURN(const WeightStream::Lease lease, weights.Acquire(linear));
  return ChunkLease(&weights, lease, num_chunks);
}

template struct ForwardContext<kernels::bf16_t>;
template struct ForwardContext<float>;

}  // namespace scored::cuda

#include "engine/cuda/transformer.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/cuda/forward/attention_block.h"
#include "engine/cuda/forward/context.h"
#include "engine/cuda/forward/delta_net_block.h"
#include "engine/cuda/forward/latent_attention_block.h"
#include "engine/cuda/forward/lm_head.h"
#include "engine/cuda/forward/mlp_block.h"
#include "engine/cuda/forward/moe_block.h"
#include "engine/cuda/peer_link.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/kernel_types.h"

namespace scored::cuda {
namespace {

// The forward pass for activation type T (bf16_t or float): Run() calls the blocks (forward/) in order on
// one context; each block calls its ops in order on the context's named activations.
template <typename T>
class ForwardPass {
 public:
  ForwardPass(const ModelConfig& config, const DeviceModel& model, GemmRunner& gemm,
              const ForwardBatch& batch, Activations* acts, cudaStream_t stream,
              const TensorParallelContext* tp, PassRole role, const BaselineModel* reference)
      : ctx_(config, model, gemm, batch, acts, stream, tp, role, reference) {}

  absl::Status Run() {
    ForwardContext<T>& ctx = ctx_;
    if (ctx.plan.layers.size() != ctx.model.layers.size()) {
      return absl::InternalError("the model's plan and its device layers differ in number");
    }
    SCORED_RETURN_IF_ERROR(ctx.weights.Start());
    {
      Stage s(ctx.clock, "embed");
      SCORED_RETURN_IF_ERROR(ctx.residual_stream.Embed());  // residual [n, hidden]
    }
    for (size_t l = 0; l < ctx.model.layers.size(); ++l) {
      const DeviceLayer& layer = ctx.model.layers[l];
      const RowSum input_sum = l > 0 ? RowSum::kAfterDown : RowSum::kNone;
      const int64_t li = static_cast<int64_t>(l);
      SCORED_RETURN_IF_ERROR(layer.delta_net_mixer ? DeltaNetBlock(ctx, layer, li, input_sum)
                             : layer.latent_mixer  ? LatentAttentionBlock(ctx, layer, li, input_sum)
                                                   : AttentionBlock(ctx, layer, li, input_sum));
      SCORED_RETURN_IF_ERROR(layer.sparse ? MoeBlock(ctx, layer, static_cast<int64_t>(l))
                                          : MlpBlock(ctx, layer, static_cast<int64_t>(l)));
    }
    NormOutput<T> final_out = ctx.NormInto(false);
    if (ctx.role == PassRole::kBaseline) final_out.normed = ctx.acts->ref_normed.template as<T>();
    {
      Stage s(ctx.clock, "final norm");
      for (int c = 0; c < ctx.num_chunks(); ++c) {  // normed (or ref_normed) [n, hidden]
        SCORED_RETURN_IF_ERROR(
            ctx.residual_stream.OpenNorm(ctx.model.final_norm, ctx.Summed(RowSum::kAfterDown), c, final_out));
      }
    }
    if (ctx.role == PassRole::kBaseline) return ctx.clock.status();
    {
      Stage s(ctx.clock, "lm_head + logprobs");
      SCORED_RETURN_IF_ERROR(LmHead(ctx));
    }
    return ctx.clock.status();
  }

 private:
  ForwardContext<T> ctx_;
};

// The reference model's pass when the batch asks for the comparison, then the model's.
template <typename T>
absl::Status RunPasses(const ModelConfig& config, const DeviceModel& model, GemmRunner& gemm,
                       const ForwardBatch& batch, Activations* acts, cudaStream_t stream,
                       const TensorParallelContext* tp, const BaselineModel* reference) {
  if (acts->stage_times != nullptr) SCORED_RETURN_IF_ERROR(acts->stage_times->Begin(stream));
  if (reference != nullptr && batch.options.want_reference) {
    SCORED_RETURN_IF_ERROR(ForwardPass<T>(*reference->config, *reference->model, gemm, batch, acts, stream,
                                          tp, PassRole::kBaseline, nullptr)
                               .Run());
  }
  return ForwardPass<T>(config, model, gemm, batch, acts, stream, tp, PassRole::kModel, reference).Run();
}

}  // namespace

absl::Status Forward(const ModelConfig& config, const DeviceModel& model, GemmRunner& gemm,
                     const ForwardBatch& batch, Activations* acts, cudaStream_t stream,
                     const TensorParallelContext* tp, const BaselineModel* reference) {
  if (batch.num_tokens <= 0 || batch.num_tokens > acts->max_tokens) {
    return absl::OutOfRangeError(
        absl::StrCat("batch of ", batch.num_tokens, " tokens; the engine holds ", acts->max_tokens));
  }
  const absl::Status status =
      model.dtype == ComputeDtype::kBf16
          ? RunPasses<kernels::bf16_t>(config, model, gemm, batch, acts, stream, tp, reference)
          : RunPasses<float>(config, model, gemm, batch, acts, stream, tp, reference);
  // A rank that stops enqueueing must not leave its peer waiting for pushes that will never come.
  if (!status.ok() && tp != nullptr && tp->peer != nullptr) tp->peer->Abort(status);
  if (tp != nullptr && acts->comm_stream.get() != nullptr) {
    // Whatever was enqueued on comm_stream (all of it on success; up to the failure otherwise) finishes
    // before `stream` drains, so the caller's Synchronize(stream) (with its timeout and abort) covers it.
    SCORED_CUDA_CHECK(cudaEventRecord(acts->comm_done.get(), acts->comm_stream.get()));
    SCORED_CUDA_CHECK(cudaStreamWaitEvent(stream, acts->comm_done.get(), 0));
  }
  return status;
}

}  // namespace scored::cuda

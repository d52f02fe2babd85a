// The residual stream of the GPU forward: the fp32 rows [num_tokens, hidden_size] (Activations::residual)
// that the embedding starts, every block's norm reads and every block's row-parallel output (o_proj,
// down_proj, or the experts' sum) joins. Two forms, chosen once per pass from the model:
//  - pre-norm (Llama and most families): a block opens with a norm of the residual rows once their sum over
//    ranks is in (RowReducer::Norm); its row-parallel output joins the residual in the GEMM's epilogue (tp:
//    rank 0 adds its partial product, the others write theirs) and starts the rows' sum over ranks.
//    Chunkable.
//  - sandwich (Gemma, ModelConfig::sandwich_norms): the block's output is normed before it joins:
//    proj = post_norm(x . W^T) in fp32, at tp 1 over the input column halves into zeroed proj ((0 + x_a .
//    W_a^T) + x_b . W_b^T, SumsInHalves), at tp > 1 each rank's partial product in proj, all-reduced (the
//    same sum bit for bit); the next norm adds proj into the residual in fp32 in the same kernel
//    (AddRmsNorm). One row chunk, no FP8-fed norm.
// Thread-safety: none (the forward's thread).
#ifndef SCORED_ENGINE_CUDA_FORWARD_RESIDUAL_H_
#define SCORED_ENGINE_CUDA_FORWARD_RESIDUAL_H_

#include "absl/status/status.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/forward/linear.h"
#include "engine/cuda/row_reduce.h"
#include "engine/cuda/weight_stream.h"

namespace scored::cuda {

template <typename T>
struct ForwardContext;

enum class ResidualForm { kPreNorm, kSandwich };

template <typename T>
class ResidualStream {
 public:
  // Borrows ctx (whose member it is).
  ResidualStream(ForwardContext<T>& ctx, ResidualForm form) : ctx_(ctx), form_(form) {}
  ResidualStream(const ResidualStream&) = delete;
  ResidualStream& operator=(const ResidualStream&) = delete;

  ResidualForm form() const { return form_; }

  // residual [n, hidden] = the embedding rows of the tokens (tp: the sum over ranks of their vocabulary
  // rows'). Gemma: times the normalizer sqrt(hidden_size), in the compute dtype as transformers does (bf16:
  // a bf16 normalizer and the product rounded to bf16; fp32: config.embedding_scale).
  absl::Status Embed();

  // The norm (weight [hidden] fp32) that opens a block (or the final norm) of chunk c into `out`: the
  // residual rows' once `sum` is in; sandwich, after the first layer's input norm: first the previous
  // block's normed output, pending in proj, added into the residual in fp32 in the same kernel.
  absl::Status OpenNorm(const DeviceBuffer& weight, RowSum sum, int c, const NormOutput<T>& out);

  // A row-parallel linear's output (o_proj, down_proj; plan: its LinearOut::kResidual plan) of chunk c from
  // x joins the stream: pre-norm, in the GEMM's epilogue, then `sum` starts the rows' sum over ranks;
  // sandwich, proj = post_norm(x . W^T), pending until the next OpenNorm. bias ([hidden] fp32, or empty):
  // added to the product in fp32 before the sum over ranks; under tp only rank 0 holds it (the shard plan's
  // ShardedLinear::adds_bias), so the sum carries it once.
  absl::Status CloseBlock(const WeightStream::Lease& w, const LinearPlan& plan, T* x, LinearInOut io,
                          const DeviceBuffer& bias, const DeviceBuffer& post_norm, RowSum sum, int c);

 private:
  absl::Status CloseSandwich(const WeightStream::Lease& w, const LinearPlan& plan, T* x, LinearInOut io,
                             const DeviceBuffer& bias, const DeviceBuffer& post_norm, int c);

  ForwardContext<T>& ctx_;
  const ResidualForm form_;
  bool pending_ = false;  // sandwich: proj holds a block's normed output not yet in the residual
};

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_FORWARD_RESIDUAL_H_

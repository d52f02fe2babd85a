#include "engine/cuda/forward/mlp_block.h"

#include <cstdint>

#include "engine/base/status_macros.h"
#include "engine/cuda/stage_times.h"
#include "engine/kernels/kernel_types.h"
#include "engine/kernels/swiglu.h"
#include "engine/kernels/swiglu_fp8.h"

namespace scored::cuda {
namespace {

// mlp [n, inter] = glu(gate, up) of chunk ch's gate_up rows (or down_proj's FP8 input act_fp8 /
// fp8_scale_mlp where swiglu_fp8: gate_up is gate|up's raw FP8 GEMM output, its scales, SwiGLU and
// down_proj's input quantization in one pass).
template <typename T>
absl::Status Glu(ForwardContext<T>& ctx, const DeviceLayer& layer, MlpActivation activation,
                 const LinearPlan& gate_up_plan, bool swiglu_fp8, const RowChunk& ch) {
  const int64_t b = ch.begin, m = ch.rows, inter = ctx.inter;
  T* gate_up_rows = ctx.gate_up + b * 2 * inter;  // [m, 2 inter]
  if (swiglu_fp8) {
    if constexpr (!ForwardContext<T>::kFp32) {
      SCORED_ASSIGN_OR_RETURN(
          const bool scaled,
          ctx.gemm.Fp8ScalesInEpilogue(layer.gate_up.out_features(), ctx.hidden, gate_up_plan.gemm_types));
      return kernels::SwiGluQuantFp8(gate_up_rows, m, inter, scaled ? nullptr : ctx.fp8_scale_norm + b,
                                     scaled ? nullptr : layer.gate_up.fp8_scale(), ctx.act_fp8 + b * inter,
                                     ctx.fp8_scale_mlp + b, ctx.stream);
    }
    return absl::OkStatus();
  }
  if (activation == MlpActivation::kGeluTanh) {
    return kernels::GeluTanhGlu<T>(gate_up_rows, gate_up_rows + inter, 2 * inter, m, inter,
                                   ctx.mlp + b * inter, ctx.stream);
  }
  return kernels::SwiGlu<T>(gate_up_rows, gate_up_rows + inter, 2 * inter, m, inter, ctx.mlp + b * inter,
                            ctx.stream);
}

}  // namespace

template <typename T>
absl::Status MlpBlock(ForwardContext<T>& ctx, const DeviceLayer& layer, int64_t l) {
  const LayerPlan& plan = ctx.plan.layers[static_cast<size_t>(l)];
  const MlpActivation activation = plan.channel_mixer.activation;
  const LinearPlan gate_up_plan = ctx.linears.Plan(layer.gate_up, LinearOut::kComputeDtype);
  const LinearPlan down_plan = ctx.linears.Plan(layer.down, LinearOut::kResidual);
  const bool gate_up_fp8 = ctx.norm_fp8_ok && gate_up_plan.fed_fp8;
  const bool swiglu_fp8 = ctx.swiglu_fp8_ok && activation == MlpActivation::kSilu &&
                          layer.gate_up.fp8_resident() && layer.gate_up.output_rotations().empty() &&
                          down_plan.fed_fp8;
  LinearInOut gate_up_io;
  gate_up_io.fp8_input_scales = gate_up_fp8 ? ctx.fp8_scale_norm : nullptr;
  gate_up_io.unscaled_fp8_output = swiglu_fp8;
  LinearInOut down_io;
  down_io.fp8_input_scales = swiglu_fp8 ? ctx.fp8_scale_mlp : nullptr;
  // The MLP's input norm: post_attention_layernorm, or the Gemma block's pre_feedforward_layernorm.
  const DeviceBuffer& input_norm = plan.sandwich() ? layer.pre_ff_norm : layer.post_norm;
  SCORED_ASSIGN_OR_RETURN(ChunkLease gate_up_w,
                          ChunkLease::Acquire(ctx.weights, layer.gate_up, ctx.num_chunks()));
  SCORED_ASSIGN_OR_RETURN(ChunkLease down_w, ChunkLease::Acquire(ctx.weights, layer.down, ctx.num_chunks()));
  for (int c = 0; c < ctx.num_chunks(); ++c) {
    const RowChunk& ch = ctx.chunks[c];
    {  // normed [n, hidden] (or act_fp8 / fp8_scale_norm)
      Stage s(ctx.clock, "norm");
      SCORED_RETURN_IF_ERROR(ctx.residual_stream.OpenNorm(input_norm, ctx.Summed(RowSum::kAfterO), c,
                                                          ctx.NormInto(gate_up_fp8)));
    }
    {  // gate_up [n, 2 inter]
      Stage s(ctx.clock, "gate|up GEMM");
      SCORED_RETURN_IF_ERROR(
          ctx.linears.Run(*gate_up_w, gate_up_plan, ctx.normed, ctx.gate_up, gate_up_io, ch));
      SCORED_RETURN_IF_ERROR(gate_up_w.ReleaseAfter(c));
    }
    {  // mlp [n, inter] = silu(gate) * up (or down_proj's FP8 input act_fp8 / fp8_scale_mlp)
      Stage s(ctx.clock, "swiglu");
      SCORED_RETURN_IF_ERROR(Glu(ctx, layer, activation, gate_up_plan, swiglu_fp8, ch));
    }
    {  // residual [n, hidden] += mlp . W_down^T (tp: this rank's partial product), then its sum over ranks
       // (the Gemma block: proj = post_feedforward_norm(mlp . W_down^T))
      Stage s(ctx.clock, "down GEMM");
      SCORED_RETURN_IF_ERROR(ctx.residual_stream.CloseBlock(*down_w, down_plan, ctx.mlp, down_io,
                                                            /*bias=*/DeviceBuffer{}, layer.post_ff_norm,
                                                            RowSum::kAfterDown, c));
      SCORED_RETURN_IF_ERROR(down_w.ReleaseAfter(c));
    }
  }
  return absl::OkStatus();
}

template absl::Status MlpBlock<kernels::bf16_t>(ForwardContext<kernels::bf16_t>&, const DeviceLayer&,
                                                int64_t);
template absl::Status MlpBlock<float>(ForwardContext<float>&, const DeviceLayer&, int64_t);

}  // namespace scored::cuda

#include "engine/cuda/forward/delta_net_block.h"

#include "engine/base/status_macros.h"
#include "engine/cuda/stage_times.h"
#include "engine/kernels/delta_net_conv.h"
#include "engine/kernels/delta_net_norm.h"
#include "engine/kernels/delta_net_prep.h"
#include "engine/kernels/delta_net_rule.h"

namespace scored::cuda {

template <typename T>
absl::Status DeltaNetBlock(ForwardContext<T>& ctx, const DeviceLayer& layer, int64_t l, RowSum input_sum) {
  (void)l;
  if (ctx.num_chunks() != 1) return absl::InternalError("the Gated DeltaNet block runs in one row chunk");
  const DeltaNetPlan& dn = ctx.delta_net;
  const DeviceDeltaNet& w = layer.delta_net;
  const int64_t n = ctx.n, conv = dn.conv_dim(), vd = dn.value_dim(), hv = dn.num_v_heads;
  const int64_t in_dim = conv + vd + 2 * hv;  // the fused GEMM's row: q|k|v (conv), z, b, a
  const int num_seqs = static_cast<int>(ctx.batch.cu_seqlens.size()) - 1;
  const RowChunk& ch = ctx.chunks[0];
  const LinearPlan in_plan = ctx.linears.Plan(layer.qkv, LinearOut::kComputeDtype);
  const LinearPlan out_plan = ctx.linears.Plan(layer.o, LinearOut::kResidual);
  SCORED_ASSIGN_OR_RETURN(ChunkLease in_w, ChunkLease::Acquire(ctx.weights, layer.qkv, 1));
  SCORED_ASSIGN_OR_RETURN(ChunkLease out_w, ChunkLease::Acquire(ctx.weights, layer.o, 1));
  const bool in_fp8 = ctx.norm_fp8_ok && in_plan.fed_fp8;
  LinearInOut in_io;
  in_io.fp8_input_scales = in_fp8 ? ctx.fp8_scale_norm : nullptr;
  {
    Stage s(ctx.clock, "norm");
    SCORED_RETURN_IF_ERROR(
        ctx.residual_stream.OpenNorm(layer.input_norm, input_sum, 0, ctx.NormInto(in_fp8)));
  }
  {  // qkv [n, in_dim]: q|k|v, z, b, a of each token
    Stage s(ctx.clock, "delta_net in GEMM");
    SCORED_RETURN_IF_ERROR(ctx.linears.Run(*in_w, in_plan, ctx.normed, ctx.qkv, in_io, ch));
  }
  SCORED_RETURN_IF_ERROR(in_w.ReleaseAfter(0));
  {
    Stage s(ctx.clock, "delta_net conv, prep");
    SCORED_RETURN_IF_ERROR(kernels::DeltaNetConv1dSilu<T>(ctx.qkv, in_dim, w.conv1d.as<float>(),
                                                          ctx.cu_seqlens, num_seqs, n, conv, dn.conv_kernel,
                                                          ctx.delta_conv, ctx.stream));
    SCORED_RETURN_IF_ERROR(kernels::DeltaNetPrep<T>(ctx.delta_conv, conv, ctx.qkv + conv + vd, in_dim,
                                                    ctx.qkv + conv + vd + hv, in_dim, w.neg_a.as<float>(),
                                                    w.dt_bias.as<float>(), n, dn.num_k_heads, hv,
                                                    dn.k_head_dim, ctx.delta_beta, ctx.delta_g, ctx.stream));
  }
  {
    Stage s(ctx.clock, "delta_net rule");
    const float* q = ctx.delta_conv;
    // The recurrent form: on an H200 it is still faster than the chunked one at the engine's shapes
    // (delta_net_rule.h has the measurements), in both compute dtypes.
    SCORED_RETURN_IF_ERROR(kernels::GatedDeltaRule(
        q, q + dn.key_dim(), q + 2 * dn.key_dim(), conv, ctx.delta_g, ctx.delta_beta, ctx.cu_seqlens,
        num_seqs, n, dn.num_k_heads, hv, dn.k_head_dim, dn.v_head_dim, ctx.delta_out, ctx.stream));
  }
  {  // attn [n, value_dim] = w * norm(out) * silu(z)
    Stage s(ctx.clock, "delta_net norm");
    SCORED_RETURN_IF_ERROR(kernels::DeltaNetGatedRmsNorm<T>(
        ctx.delta_out, ctx.qkv + conv, in_dim, w.norm.as<float>(), n, hv, dn.v_head_dim,
        static_cast<double>(ctx.config.rms_norm_eps), ctx.attn, ctx.stream));
  }
  {  // residual [n, hidden] += attn . W_out^T
    Stage s(ctx.clock, "delta_net out GEMM");
    SCORED_RETURN_IF_ERROR(ctx.residual_stream.CloseBlock(*out_w, out_plan, ctx.attn, LinearInOut{},
                                                          layer.o_bias, layer.post_norm, RowSum::kAfterO, 0));
    SCORED_RETURN_IF_ERROR(out_w.ReleaseAfter(0));
  }
  return absl::OkStatus();
}

template absl::Status DeltaNetBlock<kernels::bf16_t>(ForwardContext<kernels::bf16_t>&, const DeviceLayer&,
                                                     int64_t, RowSum);
template absl::Status DeltaNetBlock<float>(ForwardContext<float>&, const DeviceLayer&, int64_t, RowSum);

}  // namespace scored::cuda

#include "engine/cuda/forward/latent_attention_block.h"

#include <cuda_runtime_api.h>

#include "engine/base/status_macros.h"
#include "engine/cuda/forward/attention_block.h"
#include "engine/cuda/stage_times.h"
#include "engine/kernels/attention.h"
#include "engine/kernels/bias_add.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/latent_attention_pack.h"
#include "engine/kernels/rms_norm.h"
#include "engine/kernels/rope.h"

namespace scored::cuda {
namespace {

// One linear's GEMM on the batch's rows, acquired and released around it (the block's linears run one
// after another: q_a|kv_a, q_b, kv_b, o).
template <typename T>
absl::Status RunLinear(ForwardContext<T>& ctx, const DeviceLinear& linear, T* x, T* y) {
  const LinearPlan plan = ctx.linears.Plan(linear, LinearOut::kComputeDtype);
  SCORED_ASSIGN_OR_RETURN(const WeightStream::Lease w, ctx.weights.Acquire(linear));
  SCORED_RETURN_IF_ERROR(ctx.linears.Run(w, plan, x, y, LinearInOut{}, ctx.chunks[0]));
  return ctx.weights.Release(w);
}

}  // namespace

template <typename T>
absl::Status LatentAttentionBlock(ForwardContext<T>& ctx, const DeviceLayer& layer, int64_t l,
                                  RowSum input_sum) {
  if (ctx.num_chunks() != 1) return absl::InternalError("the latent attention block runs in one row chunk");
  const LatentAttentionPlan& p = ctx.plan.layers[static_cast<size_t>(l)].latent;
  const DeviceLatentAttention& w = layer.latent;
  const float* const table = OneRopeTable(ctx, l);
  if (table == nullptr) {
    return absl::InternalError("the latent attention block needs one RoPE table for every sequence");
  }
  const int64_t n = ctx.n, heads = p.num_heads, rope = p.qk_rope_head_dim, vd = p.v_head_dim;
  const int64_t q_in = p.q_lora_rank > 0 ? p.q_lora_rank : p.q_width();
  const int64_t a_dim = q_in + p.kv_a_width();  // a qkv row: q_a (or q) | c | k_rope
  const int64_t d = kernels::LatentPackedHeadDim(p.qk_head_dim(), vd), packed_dim = 3 * heads * d;
  const float eps = static_cast<float>(p.norm_eps);
  const RowChunk& ch = ctx.chunks[0];
  const LinearPlan a_plan = ctx.linears.Plan(layer.qkv, LinearOut::kComputeDtype);
  const bool a_fp8 = ctx.norm_fp8_ok && a_plan.fed_fp8;
  {
    Stage s(ctx.clock, "norm");
    SCORED_RETURN_IF_ERROR(ctx.residual_stream.OpenNorm(layer.input_norm, input_sum, 0, ctx.NormInto(a_fp8)));
  }
  {  // qkv [n, a_dim] = q_a (or q) | c | k_rope, + their bias
    Stage s(ctx.clock, "q_a|kv_a GEMM");
    LinearInOut io;
    io.fp8_input_scales = a_fp8 ? ctx.fp8_scale_norm : nullptr;
    SCORED_ASSIGN_OR_RETURN(const WeightStream::Lease a_w, ctx.weights.Acquire(layer.qkv));
    SCORED_RETURN_IF_ERROR(ctx.linears.Run(a_w, a_plan, ctx.normed, ctx.qkv, io, ch));
    SCORED_RETURN_IF_ERROR(ctx.weights.Release(a_w));
    if (layer.qkv_bias.data() != nullptr) {
      SCORED_RETURN_IF_ERROR(
          kernels::BiasAdd<T>(ctx.qkv, a_dim, layer.qkv_bias.as<float>(), n, a_dim, ctx.stream));
    }
  }
  const T* q = ctx.qkv;  // [n, heads, qk_head_dim], row stride q_stride
  int64_t q_stride = a_dim;
  {
    Stage s(ctx.clock, "latent norms, q_b, kv_b GEMMs");
    if (w.q_lora) {  // q = q_b(RMSNorm(q_a))
      SCORED_RETURN_IF_ERROR((kernels::RmsNorm<T, T>(ctx.qkv, a_dim, w.q_a_norm.as<float>(), n, p.q_lora_rank,
                                                     eps, ctx.latent_q_a, p.q_lora_rank, ctx.stream)));
      SCORED_RETURN_IF_ERROR(RunLinear(ctx, w.q_b, ctx.latent_q_a, ctx.latent_q));
      q = ctx.latent_q;
      q_stride = p.q_width();
    }
    // kv [n, heads, k_nope | v] = kv_b(RMSNorm(c))
    SCORED_RETURN_IF_ERROR(
        (kernels::RmsNorm<T, T>(ctx.qkv + q_in, a_dim, w.kv_a_norm.as<float>(), n, p.kv_lora_rank, eps,
                                ctx.latent_c, p.kv_lora_rank, ctx.stream)));
    SCORED_RETURN_IF_ERROR(RunLinear(ctx, w.kv_b, ctx.latent_c, ctx.latent_kv));
  }
  {  // packed [n, Q | K | V] (2 heads x heads of d for Q, K; heads of d for V), RoPE on Q's and K's first
     // `rope` elements (the global table: rotary_dim = qk_rope_head_dim)
    Stage s(ctx.clock, "latent pack, rope");
    const kernels::LatentPackShape shape{heads, p.qk_nope_head_dim, rope, vd, d};
    SCORED_RETURN_IF_ERROR(kernels::LatentAttentionPack<T>(q, q_stride, ctx.latent_kv, p.kv_b_width(),
                                                           ctx.qkv + q_in + p.kv_lora_rank, a_dim, n, shape,
                                                           ctx.latent_packed, ctx.stream));
    const int64_t max_tokens = ctx.acts->max_tokens;
    SCORED_RETURN_IF_ERROR(
        p.rope_interleaved
            ? kernels::RopeInterleavedWithTable<T>(ctx.latent_packed, packed_dim, ctx.positions, table,
                                                   max_tokens, n, 2 * heads, d, rope, ctx.stream)
            : kernels::RopeWithTable<T>(ctx.latent_packed, packed_dim, ctx.positions, table, max_tokens, n,
                                        2 * heads, d, rope, ctx.stream));
  }
  {  // attn [n, heads, d], then each head's first v_head_dim columns into latent_kv [n, heads * vd]
    Stage s(ctx.clock, "attention");
    kernels::AttentionShape shape;
    shape.num_tokens = n;
    shape.num_seqs = ch.num_seqs;
    shape.max_seqlen = ch.max_seqlen;
    shape.num_heads = shape.num_kv_heads = static_cast<int32_t>(heads);
    shape.head_dim = static_cast<int32_t>(d);
    shape.q_stride = shape.kv_stride = packed_dim;
    shape.scale = static_cast<float>(p.scale);
    const T* packed = ctx.latent_packed;
    SCORED_RETURN_IF_ERROR(kernels::CausalAttention<T>(packed, packed + heads * d, packed + 2 * heads * d,
                                                       ctx.cu_seqlens + ch.first_seq, shape, ctx.attn,
                                                       ctx.stream));
    SCORED_CUDA_CHECK(cudaMemcpy2DAsync(ctx.latent_kv, vd * sizeof(T), ctx.attn, d * sizeof(T),
                                        vd * sizeof(T), n * heads, cudaMemcpyDeviceToDevice, ctx.stream));
  }
  {  // residual [n, hidden] += heads' outputs . W_o^T (+ b_o)
    Stage s(ctx.clock, "o GEMM");
    const LinearPlan o_plan = ctx.linears.Plan(layer.o, LinearOut::kResidual);
    SCORED_ASSIGN_OR_RETURN(const WeightStream::Lease o_w, ctx.weights.Acquire(layer.o));
    SCORED_RETURN_IF_ERROR(ctx.residual_stream.CloseBlock(o_w, o_plan, ctx.latent_kv, LinearInOut{},
                                                          layer.o_bias, layer.post_norm, RowSum::kAfterO, 0));
    SCORED_RETURN_IF_ERROR(ctx.weights.Release(o_w));
  }
  return absl::OkStatus();
}

template absl::Status LatentAttentionBlock<kernels::bf16_t>(ForwardContext<kernels::bf16_t>&,
                                                            const DeviceLayer&, int64_t, RowSum);
template absl::Status LatentAttentionBlock<float>(ForwardContext<float>&, const DeviceLayer&, int64_t,
                                                  RowSum);

}  // namespace scored::cuda

#include "engine/cuda/forward/attention_block.h"

#include <vector>

#include "engine/base/status_macros.h"
#include "engine/cuda/stage_times.h"
#include "engine/kernels/attention.h"
#include "engine/kernels/bias_add.h"
#include "engine/kernels/kernel_types.h"
#include "engine/kernels/qk_norm.h"
#include "engine/kernels/qk_norm_rope.h"
#include "engine/kernels/rms_norm.h"
#include "engine/kernels/rope.h"
#include "engine/kernels/sigmoid_gate.h"
#include "engine/kernels/static_act_quant.h"

namespace scored::cuda {
namespace {

// RoPE of chunk ch's q and k heads with layer `l`'s table: the local layers' (Gemma 3) or the model's;
// under longrope each sequence with the table of its own length (long_factor beyond
// original_max_position_embeddings), one call per run of sequences of the same kind. Pairs (i, i + r/2), or
// (2i, 2i + 1) where the layer's AttentionPlan::rope_interleaved says.
template <typename T>
absl::Status ApplyRope(ForwardContext<T>& ctx, int64_t l, T* qkv_rows, const RowChunk& ch) {
  const int64_t heads = ctx.num_heads + ctx.num_kv_heads, max_tokens = ctx.acts->max_tokens;
  const bool interleaved = ctx.plan.layers[static_cast<size_t>(l)].attention.rope_interleaved;
  auto rope = [&](T* rows, const int32_t* positions, const float* table, int64_t num_rows) {
    return interleaved ? kernels::RopeInterleavedWithTable<T>(rows, ctx.qkv_dim, positions, table, max_tokens,
                                                              num_rows, heads, ctx.head_dim, ctx.rotary_dim,
                                                              ctx.stream)
                       : kernels::RopeWithTable<T>(rows, ctx.qkv_dim, positions, table, max_tokens, num_rows,
                                                   heads, ctx.head_dim, ctx.rotary_dim, ctx.stream);
  };
  if (const float* table = OneRopeTable(ctx, l); table != nullptr) {
    return rope(qkv_rows, ctx.positions + ch.begin, table, ch.rows);
  }
  const std::vector<int32_t>& cu = ctx.batch.cu_seqlens;
  auto is_long = [&](int s) { return ctx.plan.LongRopeFor(cu[s + 1] - cu[s]); };
  for (int s = ch.first_seq; s < ch.first_seq + ch.num_seqs;) {
    int e = s + 1;
    while (e < ch.first_seq + ch.num_seqs && is_long(e) == is_long(s)) ++e;
    const int64_t begin = cu[s], rows = cu[e] - cu[s];
    SCORED_RETURN_IF_ERROR(rope(ctx.qkv + begin * ctx.qkv_dim, ctx.positions + begin,
                                is_long(s) ? ctx.rope_long : ctx.rope_table, rows));
    s = e;
  }
  return absl::OkStatus();
}

// Qwen3's q / k norm (where the layer has one) and RoPE on the chunk's q|k heads: one fused pass
// (kernels::QkNormRope, bitwise the two) where the rotation reads one table over whole heads, else the
// norms then ApplyRope; MiniMax-M2's whole-row q / k norms (AttentionPlan::qk_norm_whole) then ApplyRope.
template <typename T>
absl::Status QkNormAndRope(ForwardContext<T>& ctx, const DeviceLayer& layer, int64_t l, T* qkv_rows,
                           const RowChunk& ch) {
  const float* const table = OneRopeTable(ctx, l);
  if (ctx.plan.layers[static_cast<size_t>(l)].attention.qk_norm_whole) {
    // MiniMax-M2: RMSNorm over each row's whole q (q_dim) and k (num_kv_heads * head_dim) parts, in place
    // (MiniMaxM2Attention.forward: q_norm(q_proj(x)) before the head reshape), then RoPE.
    SCORED_RETURN_IF_ERROR((kernels::RmsNorm<T, T>(qkv_rows, ctx.qkv_dim, layer.q_norm.as<float>(), ch.rows,
                                                   ctx.q_dim, ctx.eps, qkv_rows, ctx.qkv_dim, ctx.stream)));
    SCORED_RETURN_IF_ERROR(
        (kernels::RmsNorm<T, T>(qkv_rows + ctx.q_dim, ctx.qkv_dim, layer.k_norm.as<float>(), ch.rows,
                                ctx.kv_dim, ctx.eps, qkv_rows + ctx.q_dim, ctx.qkv_dim, ctx.stream)));
    return ApplyRope(ctx, l, qkv_rows, ch);
  }
  if (layer.q_norm.data() != nullptr && table != nullptr && ctx.rotary_dim == ctx.head_dim &&
      !ctx.plan.layers[static_cast<size_t>(l)].attention.rope_interleaved &&
      kernels::QkNormRopeSupports(ctx.head_dim)) {
    return kernels::QkNormRope<T>(qkv_rows, ctx.qkv_dim, layer.q_norm.as<float>(), layer.k_norm.as<float>(),
                                  ctx.positions + ch.begin, table, ctx.acts->max_tokens, ch.rows,
                                  ctx.num_heads, ctx.num_kv_heads, ctx.head_dim, ctx.eps, ctx.stream);
  }
  if (layer.q_norm.data() != nullptr) {
    SCORED_RETURN_IF_ERROR(kernels::QkNorm<T>(qkv_rows, ctx.qkv_dim, layer.q_norm.as<float>(), ch.rows,
                                              ctx.num_heads, ctx.head_dim, ctx.eps, ctx.stream));
    SCORED_RETURN_IF_ERROR(kernels::QkNorm<T>(qkv_rows + ctx.q_dim, ctx.qkv_dim, layer.k_norm.as<float>(),
                                              ch.rows, ctx.num_kv_heads, ctx.head_dim, ctx.eps, ctx.stream));
  }
  return ApplyRope(ctx, l, qkv_rows, ch);
}

// Chunk ch's q|k|v rows after the GEMM: bias, q/k norm and RoPE, then the FP8 KV cache's post-RoPE K and V
// quantize-dequantized per tensor.
template <typename T>
absl::Status PrepareQkv(ForwardContext<T>& ctx, const DeviceLayer& layer, int64_t l, const RowChunk& ch) {
  const int64_t m = ch.rows, qkv_dim = ctx.qkv_dim, q_dim = ctx.q_dim;
  T* qkv_rows = ctx.qkv + ch.begin * qkv_dim;  // [m, qkv_dim]
  if (layer.qkv_bias.data() != nullptr) {
    SCORED_RETURN_IF_ERROR(
        kernels::BiasAdd<T>(qkv_rows, qkv_dim, layer.qkv_bias.as<float>(), m, qkv_dim, ctx.stream));
  }
  SCORED_RETURN_IF_ERROR(QkNormAndRope(ctx, layer, l, qkv_rows, ch));
  if (layer.k_scale > 0.0f) {  // FP8 KV cache: post-RoPE K and V quantize-dequantized per tensor
    const int64_t kv_dim = (qkv_dim - q_dim) / 2;
    SCORED_RETURN_IF_ERROR(
        kernels::FakeQuantizeFp8Static<T>(qkv_rows + q_dim, qkv_dim, m, kv_dim, layer.k_scale, ctx.stream));
    SCORED_RETURN_IF_ERROR(kernels::FakeQuantizeFp8Static<T>(qkv_rows + q_dim + kv_dim, qkv_dim, m, kv_dim,
                                                             layer.v_scale, ctx.stream));
  }
  return absl::OkStatus();
}

}  // namespace

template <typename T>
const float* OneRopeTable(const ForwardContext<T>& ctx, int64_t l) {
  if (ctx.plan.layers[static_cast<size_t>(l)].attention.rope == RopeTable::kLocal) return ctx.rope_local;
  return !ctx.plan.longrope ? ctx.rope_table : nullptr;
}

template <typename T>
absl::Status AttentionBlock(ForwardContext<T>& ctx, const DeviceLayer& layer, int64_t l, RowSum input_sum) {
  const LinearPlan qkv_plan = ctx.linears.Plan(layer.qkv, LinearOut::kComputeDtype);
  const LinearPlan o_plan = ctx.linears.Plan(layer.o, LinearOut::kResidual);
  const bool qkv_fp8 = ctx.norm_fp8_ok && qkv_plan.fed_fp8;
  LinearInOut qkv_io;
  qkv_io.fp8_input_scales = qkv_fp8 ? ctx.fp8_scale_norm : nullptr;
  SCORED_ASSIGN_OR_RETURN(ChunkLease qkv_w, ChunkLease::Acquire(ctx.weights, layer.qkv, ctx.num_chunks()));
  SCORED_ASSIGN_OR_RETURN(ChunkLease o_w, ChunkLease::Acquire(ctx.weights, layer.o, ctx.num_chunks()));
  const AttentionPlan& attention = ctx.plan.layers[static_cast<size_t>(l)].attention;
  kernels::AttentionShape shape;
  shape.num_heads = static_cast<int32_t>(ctx.num_heads);
  shape.num_kv_heads = static_cast<int32_t>(ctx.num_kv_heads);
  shape.head_dim = static_cast<int32_t>(ctx.head_dim);
  shape.q_stride = ctx.qkv_dim;
  shape.kv_stride = ctx.qkv_dim;
  shape.scale = static_cast<float>(attention.scale);
  shape.softcap = attention.softcap;
  shape.window = static_cast<int32_t>(attention.window);
  for (int c = 0; c < ctx.num_chunks(); ++c) {
    const RowChunk& ch = ctx.chunks[c];
    {  // normed [n, hidden] (or act_fp8 / fp8_scale_norm)
      Stage s(ctx.clock, "norm");
      SCORED_RETURN_IF_ERROR(
          ctx.residual_stream.OpenNorm(layer.input_norm, input_sum, c, ctx.NormInto(qkv_fp8)));
    }
    {  // qkv [n, qkv_dim]
      Stage s(ctx.clock, "qkv GEMM");
      SCORED_RETURN_IF_ERROR(ctx.linears.Run(*qkv_w, qkv_plan, ctx.normed, ctx.qkv, qkv_io, ch));
    }
    SCORED_RETURN_IF_ERROR(qkv_w.ReleaseAfter(c));
    {
      Stage s(ctx.clock, "bias, q/k norm, rope");
      SCORED_RETURN_IF_ERROR(PrepareQkv(ctx, layer, l, ch));
    }
    // attn [n, q_dim] over the chunk's sequences: cu_seqlens holds absolute rows, so q / k / v / attn stay
    // the batch's.
    shape.num_tokens = ch.rows;
    shape.num_seqs = ch.num_seqs;
    shape.max_seqlen = ch.max_seqlen;
    {
      Stage s(ctx.clock, "attention");
      SCORED_RETURN_IF_ERROR(kernels::CausalAttention<T>(ctx.q, ctx.k, ctx.v, ctx.cu_seqlens + ch.first_seq,
                                                         shape, ctx.attn, ctx.stream));
    }
    if (attention.output_gate) {  // attn *= sigmoid(gate) (Qwen3.5), the gate rows after q|k|v
      Stage s(ctx.clock, "output gate");
      SCORED_RETURN_IF_ERROR(kernels::SigmoidGateMul<T>(ctx.attn + ch.begin * ctx.q_dim, ctx.q_dim,
                                                        ctx.attn_gate + ch.begin * ctx.qkv_dim, ctx.qkv_dim,
                                                        ch.rows, ctx.q_dim, ctx.stream));
    }
    {  // residual [n, hidden] += attn . W_o^T (+ b_o; tp: this rank's partial product), then its sum over
       // ranks (the Gemma block: proj = post_attention_norm(attn . W_o^T + b_o))
      Stage s(ctx.clock, "o GEMM");
      SCORED_RETURN_IF_ERROR(ctx.residual_stream.CloseBlock(
          *o_w, o_plan, ctx.attn, LinearInOut{}, layer.o_bias, layer.post_norm, RowSum::kAfterO, c));
      SCORED_RETURN_IF_ERROR(o_w.ReleaseAfter(c));
    }
  }
  return absl::OkStatus();
}

template absl::Status AttentionBlock<kernels::bf16_t>(ForwardContext<kernels::bf16_t>&, const DeviceLayer&,
                                                      int64_t, RowSum);
template absl::Status AttentionBlock<float>(ForwardContext<float>&, const DeviceLayer&, int64_t, RowSum);
template const float* OneRopeTable<kernels::bf16_t>(const ForwardContext<kernels::bf16_t>&, int64_t);
template const float* OneRopeTable<float>(const ForwardContext<float>&, int64_t);

}  // namespace scored::cuda

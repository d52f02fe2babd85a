#include "engine/cuda/forward/moe_block.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/base/status_macros.h"
#include "engine/cuda/stage_times.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/grouped_gemm.h"
#include "engine/kernels/kernel_types.h"
#include "engine/kernels/moe_combine.h"
#include "engine/kernels/moe_dispatch.h"
#include "engine/kernels/moe_route.h"
#include "engine/kernels/swiglu.h"

namespace scored::cuda {
namespace {

using kernels::bf16_t;

// y [m, hidden] = down(silu(gate(x)) * up(x)) for x [m, hidden] (gate_up / mlp as scratch), y_out's output:
// fp32 (kFp32: the shared expert) or the compute dtype (kComputeDtype: a routed expert, kernels/
// moe_combine.h).
template <typename T>
absl::Status ExpertMlp(ForwardContext<T>& ctx, const WeightStream::Lease& gate_up_w,
                       const WeightStream::Lease& down_w, T* x, int64_t m, void* y, LinearOut y_out) {
  RowChunk rows;
  rows.rows = m;
  const int64_t inter = gate_up_w.linear->out_features() / 2;
  // GEMM algorithms chosen for an expert's usual row count (max_tokens * top_k / num_experts), not
  // max_tokens: tiles sized for 16k rows leave most of the GPU idle on an expert's ~1k.
  LinearInOut io;
  io.plan_rows = std::max<int64_t>(64, ctx.acts->max_tokens * ctx.config.num_experts_per_tok /
                                           std::max<int64_t>(ctx.config.num_experts, 1));
  const LinearPlan gate_up_plan = ctx.linears.Plan(*gate_up_w.linear, LinearOut::kComputeDtype);
  const LinearPlan down_plan = ctx.linears.Plan(*down_w.linear, y_out);
  SCORED_RETURN_IF_ERROR(ctx.linears.Run(gate_up_w, gate_up_plan, x, ctx.gate_up, io, rows));
  SCORED_RETURN_IF_ERROR(
      kernels::SwiGlu<T>(ctx.gate_up, ctx.gate_up + inter, 2 * inter, m, inter, ctx.mlp, ctx.stream));
  return ctx.linears.Run(down_w, down_plan, ctx.mlp, y, io, rows);
}

// The shared expert's output (Qwen2-MoE's gated one, DeepSeek-V3's ungated ones) [n, hidden] fp32 in
// moe_shared, or nullptr where the layer has none.
template <typename T>
absl::StatusOr<const float*> SharedExpert(ForwardContext<T>& ctx, const DeviceMoe& moe) {
  if (!moe.shared) return nullptr;
  SCORED_ASSIGN_OR_RETURN(const WeightStream::Lease gate_up_w, ctx.weights.Acquire(moe.shared_gate_up));
  SCORED_ASSIGN_OR_RETURN(const WeightStream::Lease down_w, ctx.weights.Acquire(moe.shared_down));
  float* const shared = ctx.acts->moe_shared.template as<float>();
  Stage s(ctx.clock, "shared expert");
  SCORED_RETURN_IF_ERROR(ExpertMlp(ctx, gate_up_w, down_w, ctx.normed, ctx.n, shared, LinearOut::kFp32));
  SCORED_RETURN_IF_ERROR(ctx.weights.Release(gate_up_w));
  SCORED_RETURN_IF_ERROR(ctx.weights.Release(down_w));
  return shared;
}

// acc [n, hidden] = every token's experts' outputs weighted and summed in ascending expert id, one expert
// at a time: the counts copied to the host (the expert GEMMs' row counts; the one host synchronization of
// the layer), then per expert its gathered rows' MLP accumulated (kernels::MoeAccumulate).
template <typename T>
absl::Status ExpertsOneByOne(ForwardContext<T>& ctx, const DeviceMoe& moe, const int32_t* slots,
                             const float* weights, float* acc) {
  Activations* const acts = ctx.acts;
  const int64_t experts = ctx.config.num_experts, k = ctx.config.num_experts_per_tok, hidden = ctx.hidden;
  std::vector<int32_t> counts(static_cast<size_t>(experts));
  SCORED_CUDA_CHECK(cudaMemcpyAsync(counts.data(), acts->moe_counts.data(), experts * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, ctx.stream));
  SCORED_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  SCORED_CUDA_CHECK(cudaMemsetAsync(acc, 0, ctx.n * hidden * sizeof(float), ctx.stream));
  int64_t offset = 0;
  for (int64_t e = 0; e < experts; ++e) {  // every expert's lease, in order, even one with no tokens
    SCORED_ASSIGN_OR_RETURN(const WeightStream::Lease gate_up_w, ctx.weights.Acquire(moe.gate_up[e]));
    SCORED_ASSIGN_OR_RETURN(const WeightStream::Lease down_w, ctx.weights.Acquire(moe.down[e]));
    const int64_t m = counts[e];
    if (m > 0) {
      const int32_t* expert_slots = slots + offset;
      T* const x = acts->moe_x.as<T>();  // [m, hidden]
      T* const y = acts->moe_y.as<T>();  // [m, hidden]
      SCORED_RETURN_IF_ERROR(
          kernels::MoeGatherRows<T>(ctx.normed, hidden, expert_slots, m, k, hidden, x, ctx.stream));
      SCORED_RETURN_IF_ERROR(ExpertMlp(ctx, gate_up_w, down_w, x, m, y, LinearOut::kComputeDtype));
      SCORED_RETURN_IF_ERROR(kernels::MoeAccumulate(y, expert_slots, m, k, weights, hidden, acc, ctx.stream));
    }
    SCORED_RETURN_IF_ERROR(ctx.weights.Release(gate_up_w));
    SCORED_RETURN_IF_ERROR(ctx.weights.Release(down_w));
    offset += m;
  }
  return absl::OkStatus();
}

// One grouped GEMM of RunGroupedExperts (table: g.gate_up or g.down, format its 4-bit format) on the
// layer's path (GroupedExperts::path): mma.sync, the Hopper kernel over the dense tables, or the 4-bit
// experts dequantized into moe_grouped_stacked then the Hopper kernel. The workspace and the stacked
// scratch are reused by the next GEMM only after this one on the same stream.
template <typename T, typename OutT>
absl::Status GroupedExpertGemm(ForwardContext<T>& ctx, const GroupedExperts& g, const DeviceBuffer& table,
                               const kernels::GroupedInt4Format& format, const bf16_t* x,
                               const kernels::GroupedGemmShape& shape, OutT* y) {
  Activations* const acts = ctx.acts;
  const cudaStream_t stream = ctx.stream;
  void* const ws = acts->moe_grouped_workspace.data();
  const int64_t ws_bytes = acts->moe_grouped_workspace.bytes();
  const int32_t* const offsets = acts->moe_offsets.as<int32_t>();
  switch (g.path) {
    case GroupedGemmPath::kMma:
      break;
    case GroupedGemmPath::kSm90:
      if (g.int4) return absl::InternalError("the sm90 grouped path reads dense experts only");
      return kernels::GroupedGemmSm90<OutT>(x, offsets, table.as<const bf16_t*>(), shape, y, ws, ws_bytes,
                                            stream, g.sm90_schedule);
    case GroupedGemmPath::kSm90Dequant: {
      if (!g.int4) return absl::InternalError("the sm90_dequant grouped path reads 4-bit experts only");
      bf16_t* const stacked = acts->moe_grouped_stacked.as<bf16_t>();
      if (acts->moe_grouped_stacked.bytes() < shape.num_experts * shape.n * shape.k * 2) {
        return absl::InternalError("the dequantized experts' scratch is smaller than the layer's experts");
      }
      {
        Stage s(ctx.clock, "expert dequant");
        SCORED_RETURN_IF_ERROR(kernels::DequantizeGroupedInt4(table.as<kernels::GroupedInt4Expert>(), offsets,
                                                              format, shape.num_experts, shape.n, shape.k,
                                                              stacked, stream));
      }
      return kernels::GroupedGemmSm90Stacked<OutT>(x, offsets, stacked, shape, y, ws, ws_bytes, stream,
                                                   g.sm90_schedule);
    }
  }
  if (g.int4) {
    return kernels::GroupedGemmInt4<OutT>(x, offsets, table.as<kernels::GroupedInt4Expert>(), format, shape,
                                          y, stream);
  }
  return kernels::GroupedGemm<OutT>(x, offsets, table.as<const bf16_t*>(), shape, y, stream);
}

// The same sum from the grouped tables (DeviceMoe::grouped; bf16 mode), every expert at once and nothing
// copied to the host: the expert offsets and each slot's row on the device, all n * k slot rows gathered
// once, one grouped gate|up GEMM, one SwiGLU, one grouped down GEMM to bf16, then every token's k rows
// combined in ascending expert id straight into the residual with the shared expert (shared, its gate
// logits gate with stride gate_stride; kernels::MoeCombineGroupedFinish: the adds of ExpertsOneByOne and
// MoeFinish, in their order). The experts are not in the WeightStream's order (LinearsInOrder skips them):
// no lease.
template <typename T>
absl::Status RunGroupedExperts(ForwardContext<T>& ctx, const DeviceMoe& moe, const int32_t* slots,
                               const float* weights, const float* shared, const float* gate,
                               int64_t gate_stride) {
  if constexpr (ForwardContext<T>::kFp32) {
    return absl::InternalError("grouped expert GEMMs run in bf16 mode only");
  } else {
    Activations* const acts = ctx.acts;
    const cudaStream_t stream = ctx.stream;
    const GroupedExperts& g = moe.grouped;
    const int64_t experts = ctx.config.num_experts, k = ctx.config.num_experts_per_tok, n = ctx.n;
    const int64_t hidden = ctx.hidden, rows = n * k;
    const int64_t inter = moe.down[0].in_features();                 // the rank's slice (tensor parallelism)
    int32_t* const offsets = acts->moe_offsets.as<int32_t>();        // [experts + 1]
    int32_t* const slot_rows = acts->moe_slot_rows.as<int32_t>();    // [rows]
    bf16_t* const in = acts->moe_grouped_in.as<bf16_t>();            // [rows, hidden], then [rows, inter]
    bf16_t* const gate_up = acts->moe_grouped_gate_up.as<bf16_t>();  // [rows, 2 inter]
    bf16_t* const out = acts->moe_grouped_out.as<bf16_t>();          // [rows, hidden]
    if (acts->moe_grouped_gate_up.bytes() < rows * 2 * inter * 2 ||
        acts->moe_grouped_in.bytes() < rows * std::max(hidden, inter) * 2 ||
        acts->moe_grouped_out.bytes() < rows * hidden * 2) {
      return absl::InternalError("the grouped experts' activations are smaller than the layer's shapes");
    }
    {
      Stage s(ctx.clock, "moe grouped rows");
      SCORED_RETURN_IF_ERROR(kernels::MoeGroupedRows(offsets, experts, slots, rows, slot_rows, stream));
    }
    {
      Stage s(ctx.clock, "moe gather");
      SCORED_RETURN_IF_ERROR(
          kernels::MoeGatherRows<T>(ctx.normed, hidden, slots, rows, k, hidden, in, stream));
    }
    kernels::GroupedGemmShape up_shape;
    up_shape.num_experts = experts;
    up_shape.rows = rows;
    up_shape.n = 2 * inter;
    up_shape.k = hidden;
    up_shape.ldx = hidden;
    up_shape.ldy = 2 * inter;
    kernels::GroupedGemmShape down_shape = up_shape;
    down_shape.n = hidden;
    down_shape.k = inter;
    down_shape.ldx = inter;
    down_shape.ldy = hidden;
    {
      Stage s(ctx.clock, "expert gate|up GEMM");
      SCORED_RETURN_IF_ERROR(
          (GroupedExpertGemm<T, bf16_t>(ctx, g, g.gate_up, g.gate_up_format, in, up_shape, gate_up)));
    }
    {
      Stage s(ctx.clock, "expert swiglu");
      SCORED_RETURN_IF_ERROR(
          kernels::SwiGlu<T>(gate_up, gate_up + inter, 2 * inter, rows, inter, in, stream));
    }
    {
      Stage s(ctx.clock, "expert down GEMM");
      SCORED_RETURN_IF_ERROR(
          (GroupedExpertGemm<T, bf16_t>(ctx, g, g.down, g.down_format, in, down_shape, out)));
    }
    Stage s(ctx.clock, "moe combine");
    return kernels::MoeCombineGroupedFinish(out, slot_rows, weights, n, k, hidden, shared, gate, gate_stride,
                                            ctx.add_to_residual, ctx.residual, stream);
  }
}

// ids / weights [n, k] of the router's fp32 logits [n, columns], by the layer's router kind (ExpertsPlan).
template <typename T>
absl::Status Route(ForwardContext<T>& ctx, const ExpertsPlan& plan, const DeviceMoe& moe, const float* logits,
                   int64_t columns, int32_t* ids, float* weights) {
  const int64_t experts = ctx.config.num_experts, k = ctx.config.num_experts_per_tok;
  switch (plan.router) {
    case RouterKind::kSoftmaxTopK:
      return kernels::MoeRoute(logits, columns, ctx.n, experts, k, plan.norm_topk_prob, ids, weights,
                               ctx.stream);
    case RouterKind::kSigmoidGroupLimited: {
      kernels::SigmoidRouting routing;
      routing.correction_bias = plan.correction_bias ? moe.correction_bias.as<float>() : nullptr;
      routing.num_groups = plan.num_groups;
      routing.topk_groups = plan.topk_groups;
      routing.renormalize = plan.norm_topk_prob;
      routing.renorm_epsilon = plan.renorm_epsilon;
      routing.scaling_factor = plan.routed_scaling_factor;
      return kernels::MoeRouteSigmoid(logits, columns, ctx.n, experts, k, routing, ids, weights, ctx.stream);
    }
    case RouterKind::kTopKSoftmax:  // gpt-oss: refused at load (cuda_engine.cc CheckBlocksOnCuda)
      return absl::UnimplementedError("gpt-oss's router is not implemented on the CUDA backend");
  }
  return absl::InternalError("unknown router kind");
}

}  // namespace

template <typename T>
absl::Status MoeBlock(ForwardContext<T>& ctx, const DeviceLayer& layer, int64_t l) {
  if (ctx.num_chunks() != 1) return absl::InternalError("a mixture-of-experts layer runs in one row chunk");
  Activations* const acts = ctx.acts;
  const DeviceMoe& moe = layer.moe;
  const int64_t experts = ctx.config.num_experts, k = ctx.config.num_experts_per_tok, n = ctx.n;
  const ExpertsPlan& plan = ctx.plan.layers[static_cast<size_t>(l)].channel_mixer.experts;
  {
    Stage s(ctx.clock, "norm");
    SCORED_RETURN_IF_ERROR(ctx.sums.template Norm<T>(layer.post_norm.as<float>(), ctx.eps,
                                                     ctx.Summed(RowSum::kAfterO), 0, ctx.chunks[0],
                                                     ctx.NormInto(false)));  // normed [n, hidden]
  }
  RowChunk all;
  all.rows = n;
  float* const logits = acts->router_logits.as<float>();  // [n, columns]
  const int64_t columns = moe.router.out_features();
  int32_t* const ids = acts->moe_ids.as<int32_t>();      // [n, k]
  float* const weights = acts->moe_weights.as<float>();  // [n, k]
  int32_t* const slots = acts->moe_slots.as<int32_t>();  // [n * k]
  float* const acc = acts->moe_acc.as<float>();          // [n, hidden]
  SCORED_ASSIGN_OR_RETURN(const WeightStream::Lease router_w, ctx.weights.Acquire(moe.router));
  {
    Stage s(ctx.clock, "router GEMM");
    const LinearPlan router_plan = ctx.linears.Plan(moe.router, LinearOut::kFp32);
    SCORED_RETURN_IF_ERROR(ctx.linears.Run(router_w, router_plan, ctx.normed, logits, LinearInOut{}, all));
    SCORED_RETURN_IF_ERROR(ctx.weights.Release(router_w));
  }
  {
    Stage s(ctx.clock, "moe route");
    SCORED_RETURN_IF_ERROR(Route(ctx, plan, moe, logits, columns, ids, weights));
  }
  {  // the grouped path's expert offsets too ([experts + 1], on the device)
    Stage s(ctx.clock, "moe group by expert");
    int32_t* const offsets = moe.grouped.enabled ? acts->moe_offsets.as<int32_t>() : nullptr;
    SCORED_RETURN_IF_ERROR(kernels::MoeGroupByExpert(ids, n * k, experts, acts->moe_counts.as<int32_t>(),
                                                     slots, offsets, acts->moe_group_workspace.data(),
                                                     acts->moe_group_workspace.bytes(), ctx.stream));
  }
  // residual += acc (+ sigmoid(gate) * shared, or + shared where ungated); the gate's logit is the router
  // output's column `experts`. Tensor parallelism: acc and shared are the rank's partial sums (its slice of
  // every expert); rank 0 adds them to the residual, the others write them over it (0 + ...), and the sum
  // over ranks completes it.
  const float* const gate = moe.shared_gated ? logits + experts : nullptr;
  const float* shared = nullptr;
  if (moe.grouped.enabled) {  // the shared expert first: the grouped combine ends in the residual
    SCORED_ASSIGN_OR_RETURN(shared, SharedExpert(ctx, moe));
    SCORED_RETURN_IF_ERROR(RunGroupedExperts(ctx, moe, slots, weights, shared, gate, columns));
  } else {
    {
      Stage s(ctx.clock, "experts one by one");
      SCORED_RETURN_IF_ERROR(ExpertsOneByOne(ctx, moe, slots, weights, acc));
    }
    SCORED_ASSIGN_OR_RETURN(shared, SharedExpert(ctx, moe));
  }
  Stage s(ctx.clock, "moe finish");
  if (!moe.grouped.enabled) {
    if (!ctx.add_to_residual) {
      SCORED_CUDA_CHECK(cudaMemsetAsync(ctx.residual, 0, n * ctx.hidden * sizeof(float), ctx.stream));
    }
    SCORED_RETURN_IF_ERROR(
        kernels::MoeFinish(acc, shared, gate, columns, n, ctx.hidden, ctx.residual, ctx.stream));
  }
  return ctx.sums.Reduce(RowSum::kAfterDown, 0, ctx.chunks[0]);
}

template absl::Status MoeBlock<kernels::bf16_t>(ForwardContext<kernels::bf16_t>&, const DeviceLayer&,
                                                int64_t);
template absl::Status MoeBlock<float>(ForwardContext<float>&, const DeviceLayer&, int64_t);

}  // namespace scored::cuda

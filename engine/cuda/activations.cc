#include "engine/cuda/activations.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "engine/base/status_macros.h"
#include "engine/cuda/row_chunks.h"
#include "engine/kernels/baseline_compare.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/grouped_gemm.h"
#include "engine/kernels/latent_attention_pack.h"
#include "engine/kernels/logprob.h"
#include "engine/kernels/moe_dispatch.h"
#include "engine/kernels/rope.h"
#include "engine/model/layer_plan.h"

namespace scored::cuda {
namespace {

int64_t ActBytes(ComputeDtype dtype) { return dtype == ComputeDtype::kBf16 ? 2 : 4; }

// Which models a buffer exists for.
enum class When {
  kAlways,
  kFp8Gemms,        // model.max_fp8_in_features > 0: real FP8 GEMMs
  kTensorParallel,  // tp_size > 1
  kBaseline,        // a reference model is loaded
  kMoe,             // a mixture-of-experts model (a layer plan with experts)
  kMoeShared,       // one with a shared expert
  kMoeGrouped,      // one with a layer whose experts run as grouped GEMMs (DeviceMoe::grouped)
  kMoeSm90,         // one whose grouped GEMMs run GroupedGemmSm90 (GroupedExperts::path kSm90 / kSm90Dequant)
  kMoeSm90Dequant,  // one whose 4-bit experts are dequantized for it (kSm90Dequant)
};

// One buffer of Activations: bytes = per_token * max_tokens + per_logits_row * LogitsRows(shape, max_tokens)
// + fixed + unestimated.
struct BufferRow {
  DeviceBuffer Activations::*buffer;
  const char* what;  // names it in RESOURCE_EXHAUSTED
  When when;
  int64_t per_token = 0;
  int64_t per_logits_row = 0;
  int64_t fixed = 0;
  int64_t unestimated = 0;  // allocated, left out of the estimates (cu_seqlens' entry max_tokens: 4 bytes)
};

// What the table's sizes depend on.
struct TableShape {
  ComputeDtype dtype = ComputeDtype::kBf16;
  int64_t max_scratch_elements = 0;  // DeviceModel's
  int64_t max_fp8_in_features = 0;   // DeviceModel's
  int tp_size = 1;
  const ModelConfig* reference = nullptr;  // R's config, or null
  bool moe = false,
       moe_shared = false;        // the model's or its reference's (Structure: experts, a shared expert)
  bool moe_grouped = false;       // the model or its reference has grouped experts (DeviceMoe::grouped)
  bool moe_sm90 = false;          // ... some on the Hopper kernel (GroupedExperts::path != kMma)
  bool moe_sm90_dequant = false;  // ... some dequantized for it (kSm90Dequant)
};

// Rows of the logits chunk: kLmHeadChunkTokens (cuBLASLt runs a 128k-vocabulary lm_head near its peak there),
// half as many with a reference model, whose logits chunk doubles the memory otherwise (the lm_head GEMMs of
// 1024 rows lose little; tests/bench/RESULTS.md).
int64_t LogitsRows(const TableShape& s, int64_t max_tokens) {
  return std::min(max_tokens, s.reference != nullptr ? kLmHeadChunkTokens / 2 : kLmHeadChunkTokens);
}

// What a model's buffers depend on in its structure, read from its layer plan.
struct Structure {
  bool experts = false;             // some layer is a mixture of experts
  int64_t shared_intermediate = 0;  // the largest gated shared expert's size (0: none)
  bool longrope = false;            // the long-sequence RoPE table exists
  bool local_rope = false;          // the local layers' RoPE table exists
};
Structure StructureOf(const ModelConfig& c) {
  const ModelPlan plan = PlanModel(c);
  Structure s;
  s.experts = plan.any_experts();
  s.longrope = plan.longrope;
  s.local_rope = plan.local_rope;
  for (const LayerPlan& l : plan.layers) {
    if (!l.experts()) continue;
    s.shared_intermediate =
        std::max(s.shared_intermediate, l.channel_mixer.experts.shared_expert_intermediate_size);
  }
  return s;
}

// Columns of the router logits: the experts and, with a shared expert, its gate, rounded up to 4.
int64_t RouterColumnsOf(int64_t num_experts, bool shared) {
  return (num_experts + (shared ? 1 : 0) + 3) / 4 * 4;
}

// Bytes per position of a model's RoPE tables ([max_tokens, rotary_dim / 2, 2] fp32): the main one,
// longrope's long-sequence one, the local layers' one (0 where the model has none).
struct RopeTableBytes {
  int64_t main = 0, long_seq = 0, local = 0;
};
RopeTableBytes RopeBytes(const ModelConfig& c) {
  const int64_t row = (c.rotary_dim > 0 ? c.rotary_dim : c.head_dim) * 4;
  const Structure s = StructureOf(c);
  return {row, s.longrope ? row : 0, s.local_rope ? row : 0};
}

// The decoder-layer activation shapes that hold both Q's and R's forward: the larger of each dimension.
ModelConfig LargerOfEach(ModelConfig c, const ModelConfig* r) {
  if (r == nullptr) return c;
  c.hidden_size = std::max(c.hidden_size, r->hidden_size);
  c.intermediate_size = std::max(c.intermediate_size, r->intermediate_size);
  c.num_heads = std::max(c.num_heads, r->num_heads);
  c.num_kv_heads = std::max(c.num_kv_heads, r->num_kv_heads);
  c.head_dim = std::max(c.head_dim, r->head_dim);
  // Mixture-of-experts buffers hold either model's sparse layers (a dense model's fields are 0).
  c.num_experts = std::max(c.num_experts, r->num_experts);
  c.num_experts_per_tok = std::max(c.num_experts_per_tok, r->num_experts_per_tok);
  c.moe_intermediate_size = std::max(c.moe_intermediate_size, r->moe_intermediate_size);
  return c;
}

// The larger of Q's and R's shared experts (0: neither has one).
int64_t SharedIntermediate(const ModelConfig& c, const ModelConfig* r) {
  return std::max(StructureOf(c).shared_intermediate, r != nullptr ? StructureOf(*r).shared_intermediate : 0);
}

// The per-token widths (elements) of a latent attention layer's buffers (zeros for a plan without one).
struct LatentWidths {
  int64_t qkv = 0, q_a = 0, c = 0, q = 0, kv = 0, packed = 0, attn = 0;
  static LatentWidths Of(const LatentAttentionPlan& p) {
    if (p.num_heads == 0) return {};
    const int64_t d = kernels::LatentPackedHeadDim(p.qk_head_dim(), p.v_head_dim);
    const int64_t q_in = p.q_lora_rank > 0 ? p.q_lora_rank : p.q_width();
    return {q_in + p.kv_a_width(), p.q_lora_rank,       p.kv_lora_rank, p.q_lora_rank > 0 ? p.q_width() : 0,
            p.kv_b_width(),        3 * p.num_heads * d, p.num_heads * d};
  }
  LatentWidths Max(const LatentWidths& o) const {
    return {std::max(qkv, o.qkv), std::max(q_a, o.q_a),       std::max(c, o.c),      std::max(q, o.q),
            std::max(kv, o.kv),   std::max(packed, o.packed), std::max(attn, o.attn)};
  }
};

// Every buffer of Activations, in allocation order.
std::vector<BufferRow> ActivationTable(const ModelConfig& model_config, const TableShape& s) {
  const ModelConfig c = LargerOfEach(model_config, s.reference);
  const ModelConfig& r = s.reference != nullptr ? *s.reference : model_config;  // R's (unused without one)
  const int64_t act = ActBytes(s.dtype);
  const int64_t hidden = c.hidden_size;
  const int64_t shared_inter = SharedIntermediate(model_config, s.reference);
  const int64_t inter = std::max({c.intermediate_size, c.moe_intermediate_size, shared_inter});
  const int64_t experts = c.num_experts, top = c.num_experts_per_tok;
  // Gated DeltaNet layers and the attention output gate (Qwen3.5), Q's or R's: the larger of each.
  const ModelPlan plan = PlanModel(model_config);
  const ModelPlan r_plan = s.reference != nullptr ? PlanModel(*s.reference) : plan;
  DeltaNetPlan dn = plan.delta_net_shape();  // zeros without Gated DeltaNet layers
  const DeltaNetPlan r_dn = r_plan.delta_net_shape();
  if (r_dn.conv_dim() + r_dn.value_dim() > dn.conv_dim() + dn.value_dim()) dn = r_dn;
  const bool output_gate = plan.any_output_gate() || r_plan.any_output_gate();
  const int64_t q_dim = c.num_heads * c.head_dim;
  const int64_t qkv_dim_attention =
      std::max((c.num_heads + 2 * c.num_kv_heads) * c.head_dim + (output_gate ? q_dim : 0),
               dn.conv_dim() + dn.value_dim() + 2 * dn.num_v_heads);
  // Multi-head latent attention layers, Q's or R's: the larger of each width (zeros without).
  const LatentWidths lat = LatentWidths::Of(plan.latent_shape()).Max(LatentWidths::Of(r_plan.latent_shape()));
  const int64_t qkv_dim = std::max(qkv_dim_attention, lat.qkv);
  const int64_t attn_dim = std::max({q_dim, dn.value_dim(), lat.attn});
  const int64_t top_k = kernels::kMaxTopK, candidates = kernels::kMaxCandidates, tp = s.tp_size;
  const int64_t stats = static_cast<int64_t>(sizeof(kernels::LogitPartialStats));
  using A = Activations;
  const int64_t ref_stats = static_cast<int64_t>(sizeof(kernels::BaselinePartialStats));
  const RopeTableBytes rope = RopeBytes(model_config), ref_rope = RopeBytes(r);
  constexpr When kAll = When::kAlways, kFp8 = When::kFp8Gemms, kTp = When::kTensorParallel;
  constexpr When kRef = When::kBaseline, kMoe = When::kMoe, kShared = When::kMoeShared;
  constexpr When kGrouped = When::kMoeGrouped;
  const int64_t moe_inter = c.moe_intermediate_size;
  return {
      // buffer, what, when, per token, per logits row, fixed (, unestimated)
      {&A::residual, "the residual stream", kAll, hidden * 4},
      {&A::normed, "normed activations", kAll, hidden * act},
      {&A::qkv, "q|k|v activations", kAll, qkv_dim * act},
      {&A::attn, "attention output", kAll, attn_dim * act},
      {&A::delta_conv, "the Gated DeltaNet's conv output", kAll, dn.conv_dim() * 4},
      {&A::delta_beta, "the Gated DeltaNet's beta", kAll, dn.num_v_heads * 4},
      {&A::delta_g, "the Gated DeltaNet's decay", kAll, dn.num_v_heads * 4},
      {&A::delta_out, "the Gated DeltaNet's output", kAll, dn.value_dim() * 4},
      {&A::latent_q_a, "the latent attention's normed q_a", kAll, lat.q_a * act},
      {&A::latent_c, "the latent attention's normed latent", kAll, lat.c * act},
      {&A::latent_q, "the latent attention's q", kAll, lat.q * act},
      {&A::latent_kv, "the latent attention's k_nope|v", kAll, lat.kv * act},
      {&A::latent_packed, "the latent attention's packed q|k|v", kAll, lat.packed * act},
      {&A::proj, "projection output", kAll, hidden * 4},
      {&A::gate_up, "gate|up activations", kAll, 2 * inter * act},
      {&A::mlp, "swiglu output", kAll, inter * act},
      {&A::scratch, "the dequantized-weight scratch", kAll, 0, 0, s.max_scratch_elements * act},
      {&A::scratch2, "the second dequantized-weight scratch", kAll, 0, 0, s.max_scratch_elements * act},
      {&A::act_fp8, "FP8 / INT8 GEMM activations", kFp8, s.max_fp8_in_features},
      {&A::act_scale, "FP8 / INT8 activation scales", kFp8, 2 * 4},
      {&A::router_logits, "the router logits", kMoe, RouterColumnsOf(experts, shared_inter > 0) * 4},
      {&A::moe_ids, "the experts of each token", kMoe, top * 4},
      {&A::moe_weights, "the expert weights of each token", kMoe, top * 4},
      {&A::moe_slots, "the token slots by expert", kMoe, top * 4},
      {&A::moe_counts, "the slot counts per expert", kMoe, 0, 0, experts * 4},
      // MoeGroupByExpertWorkspaceBytes(max_tokens * top, experts): a chunk's experts' counts per
      // kMoeGroupChunkSlots slots (rounded up per token), and one more chunk
      {&A::moe_group_workspace, "the grouping's per-chunk counts", kMoe,
       (top * experts * 4 + kernels::kMoeGroupChunkSlots - 1) / kernels::kMoeGroupChunkSlots, 0, experts * 4},
      {&A::moe_x, "an expert's input rows", kMoe, hidden * act},
      {&A::moe_y, "an expert's output rows", kMoe, hidden * act},
      {&A::moe_acc, "the expert sum", kMoe, hidden * 4},
      {&A::moe_shared, "the shared expert's output", kShared, hidden * 4},
      {&A::moe_offsets, "the grouped experts' row offsets", kGrouped, 0, 0, (experts + 1) * 4},
      {&A::moe_slot_rows, "each slot's grouped row", kGrouped, top * 4},
      {&A::moe_grouped_in, "the grouped experts' input rows", kGrouped,
       top * std::max(hidden, moe_inter) * 2},
      {&A::moe_grouped_gate_up, "the grouped experts' gate|up rows", kGrouped, top * 2 * moe_inter * 2},
      {&A::moe_grouped_out, "the grouped experts' output rows", kGrouped, top * hidden * 2},
      {&A::moe_grouped_workspace, "the sm90 grouped GEMM's workspace", When::kMoeSm90, 0, 0,
       s.moe_sm90 ? kernels::GroupedGemmSm90WorkspaceBytes(experts) : 0},
      {&A::moe_grouped_stacked, "the dequantized experts of one grouped GEMM", When::kMoeSm90Dequant, 0, 0,
       experts * 2 * moe_inter * hidden * 2},
      {&A::logits, "the fp32 logits chunk", kAll, 0, c.vocab_size * 4},
      {&A::tokens, "token ids", kAll, 4},
      {&A::positions, "positions", kAll, 4},
      {&A::rope_table, "the RoPE cos/sin table", kAll, rope.main},
      {&A::rope_table_long, "the RoPE table of long sequences", kAll, rope.long_seq},
      {&A::rope_table_local, "the local layers' RoPE table", kAll, rope.local},
      {&A::cu_seqlens, "sequence offsets", kAll, 4, 0, 0, 4},
      {&A::targets, "targets", kAll, 4},
      {&A::logprob, "logprobs", kAll, 8},
      {&A::greedy, "greedy flags", kAll, 1},
      {&A::rank, "ranks", kAll, 4},
      {&A::entropy, "entropies", kAll, 4},
      {&A::top_k_ids, "top-k ids", kAll, top_k * 4},
      {&A::top_k_logprobs, "top-k logprobs", kAll, top_k * 4},
      {&A::candidate_ids, "candidate ids", kAll, candidates * 4},
      {&A::candidate_logprobs, "candidate logprobs", kAll, candidates * 4},
      {&A::min_logprob, "min logprobs", kAll, 4},
      {&A::tp_stats, "the vocab-parallel statistics", kTp, 0, tp * stats},
      {&A::tp_target_logit, "target logits", kTp, 0, 4},
      {&A::act_amax, "activation amax", kTp, 2 * 4},
      {&A::tp_topk_ids, "vocab-parallel top-k ids", kTp, 0, tp * top_k * 4},
      {&A::tp_topk_values, "vocab-parallel top-k logits", kTp, 0, tp * top_k * 4},
      {&A::ref_normed, "the reference model's normed rows", kRef, r.hidden_size * act},
      {&A::ref_rope_table, "the reference model's RoPE table", kRef, ref_rope.main},
      {&A::ref_rope_table_long, "the reference model's RoPE table of long sequences", kRef,
       ref_rope.long_seq},
      {&A::ref_rope_table_local, "the reference model's local RoPE table", kRef, ref_rope.local},
      {&A::ref_logits, "the reference model's fp32 logits chunk", kRef, 0, r.vocab_size * 4},
      {&A::ref_stats, "the reference comparison's statistics", kRef, 0, tp * ref_stats},
      {&A::ref_logprob, "reference logprobs", kRef, 8},
      {&A::kld, "KL divergences", kRef, 8},
      {&A::ref_greedy, "reference greedy flags", kRef, 1},
      {&A::same_top, "top-1 agreement flags", kRef, 1},
  };
}

bool Exists(const BufferRow& row, const TableShape& s) {
  switch (row.when) {
    case When::kAlways:
      return true;
    case When::kFp8Gemms:
      return s.max_fp8_in_features > 0;
    case When::kTensorParallel:
      return s.tp_size > 1;
    case When::kBaseline:
      return s.reference != nullptr;
    case When::kMoe:
      return s.moe;
    case When::kMoeShared:
      return s.moe_shared;
    case When::kMoeGrouped:
      return s.moe_grouped;
    case When::kMoeSm90:
      return s.moe_sm90;
    case When::kMoeSm90Dequant:
      return s.moe_sm90_dequant;
  }
  return false;
}

// Sets s's grouped-expert flags for the model's sparse layers (or-ed into what is there).
void AddGroupedExperts(const DeviceModel& model, TableShape* s) {
  for (const DeviceLayer& layer : model.layers) {
    if (!layer.sparse || !layer.moe.grouped.enabled) continue;
    s->moe_grouped = true;
    s->moe_sm90 = s->moe_sm90 || layer.moe.grouped.path != GroupedGemmPath::kMma;
    s->moe_sm90_dequant = s->moe_sm90_dequant || layer.moe.grouped.path == GroupedGemmPath::kSm90Dequant;
  }
}

TableShape ShapeOf(const DeviceModel& model, int tp_size, const BaselineModel* reference) {
  TableShape s;
  AddGroupedExperts(model, &s);
  s.dtype = model.dtype;
  s.max_scratch_elements = model.max_scratch_elements;
  s.max_fp8_in_features = model.max_fp8_in_features;
  s.tp_size = tp_size;
  if (reference != nullptr) {
    s.reference = reference->config;
    if (reference->model != nullptr) {
      s.max_scratch_elements = std::max(s.max_scratch_elements, reference->model->max_scratch_elements);
      s.max_fp8_in_features = std::max(s.max_fp8_in_features, reference->model->max_fp8_in_features);
      AddGroupedExperts(*reference->model, &s);
    }
  }
  return s;
}

// The model's (and its reference model's) own kinds of buffers.
TableShape WithModel(TableShape s, const ModelConfig& config) {
  s.moe = StructureOf(config).experts || (s.reference != nullptr && StructureOf(*s.reference).experts);
  s.moe_shared = SharedIntermediate(config, s.reference) > 0;
  return s;
}

// Per token: the buffers every model has, with a reference model its own, a mixture-of-experts model's (all
// scale with the batch). The grouped experts' buffers (kMoeGrouped) depend on the loaded weights' formats, so
// like the FP8 ones they are counted with the model (FixedActivationBytes), not per token before the load.
bool PerTokenRow(const BufferRow& row) {
  return row.when == When::kAlways || row.when == When::kBaseline || row.when == When::kMoe ||
         row.when == When::kMoeShared;
}

// Fills a model's RoPE tables (allocated by the table above) for positions [0, positions), cos and sin times
// its attention scaling (longrope).
absl::Status BuildRopeTables(const ModelConfig& config, const DeviceModel& model, int64_t positions,
                             DeviceBuffer* main, DeviceBuffer* long_seq, DeviceBuffer* local) {
  const int64_t half = (config.rotary_dim > 0 ? config.rotary_dim : config.head_dim) / 2;
  const std::pair<const DeviceBuffer*, DeviceBuffer*> tables[] = {{&model.rope_inv_freq, main},
                                                                  {&model.rope_inv_freq_long, long_seq},
                                                                  {&model.rope_inv_freq_local, local}};
  for (const auto& [inv_freq, table] : tables) {
    if (table->data() == nullptr || inv_freq->data() == nullptr) continue;
    SCORED_RETURN_IF_ERROR(kernels::RopeCosSinTable(inv_freq->as<float>(), positions, half,
                                                    model.rope_scaling, table->as<float>(), nullptr));
  }
  return absl::OkStatus();
}

}  // namespace

WeightScratch Activations::weight_scratch() const {
  WeightScratch s;
  s.buffer[0] = scratch.data();
  s.buffer[1] = scratch2.data();
  s.dequant_stream = dequant_stream.get();
  for (int i = 0; i < 2; ++i) {
    s.ready[i] = weight_ready[i].get();
    s.free[i] = weight_free[i].get();
  }
  return s;
}

int64_t RouterColumns(const ModelConfig& config) {
  return RouterColumnsOf(config.num_experts, StructureOf(config).shared_intermediate > 0);
}

int64_t ActivationBytesPerToken(const ModelConfig& config, ComputeDtype dtype,
                                const BaselineModel* reference) {
  TableShape s;
  s.dtype = dtype;
  s.reference = reference != nullptr ? reference->config : nullptr;
  s = WithModel(s, config);
  int64_t bytes = 0;
  for (const BufferRow& row : ActivationTable(config, s)) {
    if (PerTokenRow(row) && Exists(row, s)) bytes += row.per_token;
  }
  return bytes;
}

int64_t FixedActivationBytes(const ModelConfig& config, const DeviceModel& model, int64_t max_tokens,
                             int tp_size, const BaselineModel* reference) {
  const TableShape s = WithModel(ShapeOf(model, tp_size, reference), config);
  int64_t bytes = 0;
  for (const BufferRow& row : ActivationTable(config, s)) {
    if (!Exists(row, s)) continue;
    bytes += row.per_logits_row * LogitsRows(s, max_tokens) + row.fixed;
    if (!PerTokenRow(row)) bytes += row.per_token * max_tokens;  // not in ActivationBytesPerToken
  }
  return bytes;
}

absl::StatusOr<Activations> AllocateActivations(const ModelConfig& config, const DeviceModel& model,
                                                int64_t max_tokens, int tp_size,
                                                const BaselineModel* reference) {
  const int64_t t = max_tokens;
  const TableShape s = WithModel(ShapeOf(model, tp_size, reference), config);
  Activations a;
  a.max_tokens = max_tokens;
  a.logits_rows = LogitsRows(s, max_tokens);
  for (const BufferRow& row : ActivationTable(config, s)) {
    if (!Exists(row, s)) continue;
    const int64_t bytes =
        row.per_token * t + row.per_logits_row * LogitsRows(s, t) + row.fixed + row.unestimated;
    SCORED_ASSIGN_OR_RETURN(a.*row.buffer, DeviceBuffer::Allocate(bytes, row.what));
  }
  // A window's positions are < its length <= max_tokens: the tables serve every forward, built once here.
  SCORED_RETURN_IF_ERROR(
      BuildRopeTables(config, model, t, &a.rope_table, &a.rope_table_long, &a.rope_table_local));
  if (reference != nullptr) {
    SCORED_RETURN_IF_ERROR(BuildRopeTables(*reference->config, *reference->model, t, &a.ref_rope_table,
                                           &a.ref_rope_table_long, &a.ref_rope_table_local));
  }
  SCORED_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  if (s.max_scratch_elements > 0) {
    SCORED_ASSIGN_OR_RETURN(a.dequant_stream, CudaStream::Create());
    for (int i = 0; i < 2; ++i) {
      SCORED_ASSIGN_OR_RETURN(a.weight_ready[i], CudaEvent::Create());
      SCORED_ASSIGN_OR_RETURN(a.weight_free[i], CudaEvent::Create());
    }
  }
  if (tp_size > 1) {
    SCORED_ASSIGN_OR_RETURN(a.comm_stream, CudaStream::CreateHighestPriority());
    for (int c = 0; c < kMaxTpRowChunks; ++c) {
      SCORED_ASSIGN_OR_RETURN(CudaEvent ready, CudaEvent::Create());
      SCORED_ASSIGN_OR_RETURN(CudaEvent reduced, CudaEvent::Create());
      a.chunk_ready.push_back(std::move(ready));
      a.chunk_reduced.push_back(std::move(reduced));
    }
    SCORED_ASSIGN_OR_RETURN(a.comm_done, CudaEvent::Create());
  }
  return a;
}

}  // namespace scored::cuda

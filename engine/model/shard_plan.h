// Tensor-parallel sharding of a model's weights (Megatron layout, DESIGN.md §7): which slice of every
// linear each of tp_size ranks owns, and a rank's LinearWeight VIEW of its slice.
//
// Layout per decoder layer (activations [tokens, hidden] are replicated on every rank):
//   q/k/v_proj   column-parallel: output rows of whole heads. Rank r owns q heads
//                [r*H/tp, (r+1)*H/tp). KV heads: when num_kv_heads >= tp, rank r owns kv heads
//                [r*KV/tp, (r+1)*KV/tp); when num_kv_heads < tp (tp % num_kv_heads == 0) the kv heads are
//                REPLICATED: rank r owns kv head r / (tp / KV), the one its q heads attend to.
//   o_proj       row-parallel: input columns [r*H/tp*head_dim, ...), i.e. the rank's q heads; the partial
//                outputs [tokens, hidden] are summed by an all-reduce (bias, if any, added once: rank 0).
//   gate/up_proj column-parallel: rows [r*I/tp, (r+1)*I/tp) of intermediate_size I.
//   down_proj    row-parallel: input columns [r*I/tp, (r+1)*I/tp), then all-reduce.
//   embedding,   vocab-parallel: rank r owns rows [r*P, min((r+1)*P, vocab)), P = ceil(vocab/tp) (every
//   lm_head      rank's logits buffer is P wide; the last rank's tail is padding). The embedding lookup of
//                an id outside the rank's rows gives 0 and an all-reduce sums the rows; lm_head logits stay
//                on their rank, and the log-softmax combines per-token partial statistics
//                (kernels::ComputeLogitPartialStats / CombineLogitPartialStats) instead of the logits.
//   norms, q_norm/k_norm (per head_dim): replicated.
//   Mixture-of-experts layers (ModelConfig::IsSparseLayer) split every expert like the dense MLP: each
//   expert's gate/up column-parallel over rows [r*Ie/tp, (r+1)*Ie/tp) of moe_intermediate_size Ie, its
//   down row-parallel over the same columns; the shared expert likewise over shared_expert_intermediate_size.
//   The router and shared_expert_gate are replicated: every rank computes the same routing (and the same
//   shared-expert gate) from the replicated activations, runs its slice of every expert, weights its partial
//   outputs, and one all-reduce sums the block (the combine is linear in the expert outputs).
//
// Quantized weights (what ShardLinear checks, with errors naming the module, the dimension and the split):
//   - pack-quantized group strategy (no g_idx): a row-parallel split must fall on a multiple of group_size;
//     the rank keeps its scale (and zero-point) columns.
//   - actorder g_idx: any row-parallel split; the rank keeps exactly the scale groups its columns use (in
//     ascending group order) and a re-indexed g_idx for its columns.
//   - asymmetric zero points (packed along `out`): column-parallel row slices that start on a multiple of
//     32/num_bits rows are a view; others are re-packed per shard.
//   - nvfp4: row-parallel splits on multiples of 16 (one fp8 scale per 16 columns); the global scale is
//     per tensor and shared by every shard of it.
//   - fp8 block scales: a slice must start on a block boundary or lie inside one block.
//   - fp8 (int8) W8A8 with per-token dynamic activation scales: a row-parallel shard sees only part of a
//     token's input, so its activation scale needs the max (int8: min and max) over all ranks
//     (ShardedLinear::act_amax_all_reduce);
//     with per-group activation scales the split must fall on a multiple of act_group_size.
//   - bit-packed values (int4/int8 in int32) whose row-parallel split is not word aligned are re-packed.
//
// Bytes: a column-parallel (and vocab-parallel) view points into the mmapped tensors (rows are contiguous),
// so a rank touches only its own pages. A row-parallel slice is strided in the row-major [out, in] tensor,
// so its values (and group scales / zero points / g_idx) are copied into buffers the ShardedLinear owns,
// 1/tp of the tensor; scalar and per-row parameters stay views. Nothing builds a full-model host copy.
//
// Thread-safety: ShardPlan is a value; ShardLinear only reads the full weight (thread-safe, as
// LinearWeight's const methods). A ShardedLinear's view is valid while both the ShardedLinear and the
// ModelWeights it was cut from live.
#ifndef SCORED_ENGINE_MODEL_SHARD_PLAN_H_
#define SCORED_ENGINE_MODEL_SHARD_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"

namespace scored {

enum class ShardKind {
  kReplicated,      // the whole weight
  kColumnParallel,  // output rows [begin, end)
  kRowParallel,     // input columns [begin, end)
  kVocabParallel,   // output rows [begin, end) of a vocab-sized weight (same cut as column-parallel)
};

const char* ShardKindName(ShardKind kind);

struct LinearSlice {
  ShardKind kind = ShardKind::kReplicated;
  int64_t begin = 0;  // first row (column/vocab-parallel) or input column (row-parallel)
  int64_t end = 0;    // one past the last
  int64_t size() const { return end - begin; }
};

// LinearRole (weights.h): which linear of a layer a weight is.

struct ShardPlan {
  int tp_size = 1;
  int tp_rank = 0;

  int64_t num_heads_local = 0;     // q heads of this rank
  int64_t q_head_begin = 0;        // first global q head
  int64_t num_kv_heads_local = 0;  // kv heads of this rank (1 when replicated)
  int64_t kv_head_begin = 0;       // first global kv head
  int64_t kv_replicas = 1;         // ranks holding the same kv head: tp / num_kv_heads when KV < tp, else 1
  int64_t intermediate_local = 0;  // intermediate_size / tp
  int64_t moe_intermediate_local = 0;     // moe_intermediate_size / tp (0 for a dense model)
  int64_t shared_intermediate_local = 0;  // shared_expert_intermediate_size / tp (0: no shared expert)

  int64_t vocab_size = 0;
  int64_t vocab_per_rank = 0;  // padded: ceil(vocab_size / tp), the width of every rank's logits
  int64_t vocab_begin = 0;     // rows [vocab_begin, vocab_end) of embedding / lm_head
  int64_t vocab_end = 0;       // <= vocab_begin + vocab_per_rank (the last rank may own fewer)

  LinearSlice q, k, v, o, gate, up, down, lm_head;
  // Mixture-of-experts: the same slices for every expert; router and shared_expert_gate replicated.
  LinearSlice router, expert_gate, expert_up, expert_down, shared_gate, shared_up, shared_down,
      shared_expert_gate;
  // Gated DeltaNet layers' and latent attention layers' own linears: replicated (no family with them is
  // tensor-parallel yet).
  LinearSlice delta_net;

  // Validates divisibility (errors name the config field: num_attention_heads, num_key_value_heads,
  // intermediate_size, moe_intermediate_size, shared_expert_intermediate_size, vocab_size) and computes the
  // rank's slices. INVALID_ARGUMENT for tp_size < 1 or tp_rank outside [0, tp_size); UNIMPLEMENTED for
  // tp_size > 1 when the config's family is not FamilyTraits::tensor_parallel (family.h).
  static absl::StatusOr<ShardPlan> Create(const ModelConfig& config, int tp_size, int tp_rank);

  const LinearSlice& ForLinear(LinearRole role) const;
};

// A rank's view of one linear. Move-only: `view`'s owned tensors point into `owned`.
struct ShardedLinear {
  LinearWeight view;  // out_features/in_features are the LOCAL shape; module unchanged
  LinearSlice slice;
  // Row-parallel W8A8 with per-token dynamic FP8 (INT8) activations: the activation scale of a token is
  // max|x| (int8: max and min of x) over ALL of its input columns, so ranks must all-reduce (max) their
  // per-token amax (range) before quantizing. False otherwise.
  bool act_amax_all_reduce = false;
  int64_t owned_bytes = 0;  // bytes copied/re-packed for this shard (0 when the view is all mmap)

  ShardedLinear() = default;
  ShardedLinear(ShardedLinear&&) = default;
  ShardedLinear& operator=(ShardedLinear&&) = default;
  ShardedLinear(const ShardedLinear&) = delete;
  ShardedLinear& operator=(const ShardedLinear&) = delete;

  std::vector<std::vector<uint8_t>> owned;  // backing store of re-packed tensors (stable on move)
  // Row-parallel only: whether this rank adds the bias (rank 0; the others' view has no bias).
  bool adds_bias = true;
};

// Checks that `full` can be cut as `slice` (see the header comment), without building anything.
// INVALID_ARGUMENT naming the module, the dimension and the offending offset; OUT_OF_RANGE for a slice
// outside the weight.
absl::Status CheckShardable(const LinearWeight& full, const LinearSlice& slice, int tp_rank);

// The view of `slice` of `full` for rank tp_rank (tp_rank decides who keeps a row-parallel bias).
// DequantizeRows of the view gives exactly the matching part of full's DequantizeRows.
absl::StatusOr<ShardedLinear> ShardLinear(const LinearWeight& full, const LinearSlice& slice, int tp_rank);

// Rows [plan.vocab_begin, plan.vocab_end) of the embedding [vocab, hidden]: a view into the mmap.
absl::StatusOr<TensorView> ShardEmbedding(const TensorView& embed_tokens, const ShardPlan& plan);

// The model as rank plan.tp_rank computes it: num_heads, num_kv_heads, intermediate_size,
// moe_intermediate_size and shared_expert_intermediate_size are the rank's (num_heads_local,
// num_kv_heads_local, intermediate_local, moe_intermediate_local, shared_intermediate_local) and vocab_size
// is vocab_per_rank (the width of the rank's logits); everything else as `config`. Used to size a rank's
// activations.
ModelConfig LocalConfig(const ModelConfig& config, const ShardPlan& plan);

// Create() for every rank and CheckShardable() for every linear of every rank: the startup check of
// `--tp tp_size`, so a non-shardable checkpoint fails before anything is copied to a device.
absl::Status ValidateTensorParallel(const ModelWeights& weights, int tp_size);

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_SHARD_PLAN_H_

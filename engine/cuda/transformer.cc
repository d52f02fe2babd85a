#include "engine/cuda/transformer.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/cuda/peer_link.h"
#include "engine/cuda/row_reduce.h"
#include "engine/cuda/weight_stream.h"
#include "engine/dist/nccl_communicator.h"
#include "engine/dist/vocab_parallel_logprob.h"
#include "engine/kernels/attention.h"
#include "engine/kernels/bias_add.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/embedding.h"
#include "engine/kernels/fp8_quant.h"
#include "engine/kernels/fp8_scale.h"
#include "engine/kernels/grouped_gemm.h"
#include "engine/kernels/hadamard_rotate.h"
#include "engine/kernels/int8_gemm.h"
#include "engine/kernels/int8_quant.h"
#include "engine/kernels/kernel_types.h"
#include "engine/kernels/moe_combine.h"
#include "engine/kernels/moe_dispatch.h"
#include "engine/kernels/moe_route.h"
#include "engine/kernels/qk_norm.h"
#include "engine/kernels/qk_norm_rope.h"
#include "engine/kernels/reference_compare.h"
#include "engine/kernels/rms_norm.h"
#include "engine/kernels/rms_norm_fp8.h"
#include "engine/kernels/rope.h"
#include "engine/kernels/soft_cap.h"
#include "engine/kernels/static_act_quant.h"
#include "engine/kernels/swiglu.h"
#include "engine/kernels/swiglu_fp8.h"

namespace scored::cuda {

using kernels::bf16_t;

namespace {

int64_t ActBytes(ComputeDtype dtype) { return dtype == ComputeDtype::kBf16 ? 2 : 4; }

// x rounded to bf16 (nearest even) and widened back: a bf16 constant's value (finite x).
float RoundedToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  float y;
  std::memcpy(&y, &bits, sizeof(y));
  return y;
}

// How the forward runs one linear on a chunk's rows; the default is y = x . W^T. Set by named field.
struct LinearInOut {
  // y += x . W^T (fp32 y: the residual stream). A real FP8 GEMM writes proj and AddFp8Scaled joins it to y.
  bool add_to_output = false;
  // Real FP8 GEMM only: x is already in act_fp8 with these per-token scales [num_tokens] (a fused norm /
  // SwiGLU kernel wrote them); x itself is unused.
  const float* fp8_input_scales = nullptr;
  // Real FP8 GEMM only: where the scales come after the GEMM, leave y unscaled (the next op applies them;
  // GemmRunner::Fp8ScalesInEpilogue says which).
  bool unscaled_fp8_output = false;
  // With add_to_output: y += x_a . W_a^T, then y += x_b . W_b^T over the two halves of the input columns
  // (SumsInHalves).
  bool sum_in_halves = false;
  // LinearOptions::plan_rows of the bf16 / fp32 GEMMs (0: max_tokens): a mixture-of-experts expert's.
  int64_t plan_rows = 0;
};

// Whether a tensor-parallel forward may run in row chunks: not where a row-parallel W8A8 linear all-reduces
// its input's per-token amax on the forward's stream (NCCL work would then be pending on two streams at once;
// those linears also need every rank's columns before their GEMM).
// Nor in the Gemma block (its row-parallel outputs are summed in proj before their norms, one all-reduce on
// the forward's stream), nor in a mixture-of-experts model (its sparse layers route the whole batch at once).
bool Chunkable(const ModelConfig& config, const DeviceModel& model) {
  if (config.sandwich_norms || config.moe()) return false;
  for (const DeviceLayer& layer : model.layers) {
    for (const DeviceLinear* w : {&layer.qkv, &layer.o, &layer.gate_up, &layer.down}) {
      if ((w->fp8_resident() || w->w8a8_dynamic_fp8() || w->w8a8_dynamic_int8()) &&
          w->act_amax_all_reduce()) {
        return false;
      }
    }
  }
  return true;
}

// The forward pass for activation type T (bf16_t or float): Run() calls the blocks in order; each block
// calls its ops in order on named activations.
//
// Row chunks (tp > 1, RowChunks): whole sequences each, so every op of a decoder layer runs chunk by chunk
// and chunk c's sum over ranks (after o_proj, after down_proj; RowReducer) overlaps the next chunks' compute.
// One chunk at tp 1. A row's result is the same whatever the chunking: GEMM algorithms are pinned per weight
// shape (gemm.h), norms and element-wise ops are per row, attention is per sequence, and a row's sum over
// two ranks is one fp32 add (at tp > 2 NCCL's reduction order may depend on the message size).
// Each linear's weight comes from the WeightStream between its Acquire (before its first chunk) and Release
// (after its last chunk's GEMM).
// Two roles: the scored model's pass (kModel: the lm_head, the per-row statistics and, with `reference`,
// the comparison), and the reference model's pass (kReference: up to the final norm, written to
// acts->ref_normed, with R's RoPE table), which runs first in the same activations.
enum class PassRole { kModel, kReference };

template <typename T>
class ForwardPass {
 public:
  ForwardPass(const ModelConfig& config, const DeviceModel& model, GemmRunner& gemm,
              const ForwardBatch& batch, Activations* acts, cudaStream_t stream,
              const TensorParallelContext* tp, PassRole role, const ReferenceModel* reference)
      : config_(config),
        model_(model),
        gemm_(gemm),
        batch_(batch),
        acts_(acts),
        stream_(stream),
        tp_(tp),
        role_(role),
        reference_(reference),
        chunks_(RowChunks(batch.cu_seqlens, batch.num_tokens, batch.num_seqs, batch.max_seqlen,
                          acts->tp_row_chunks, tp != nullptr && Chunkable(config, model))),
        weights_(model, acts->weight_scratch(), stream),
        sums_(tp, acts, static_cast<int>(chunks_.size()), config.hidden_size, stream) {}

  absl::Status Run() {
    SCORED_RETURN_IF_ERROR(weights_.Start());
    SCORED_RETURN_IF_ERROR(Embed());
    SCORED_RETURN_IF_ERROR(Mark("embed"));
    for (size_t l = 0; l < model_.layers.size(); ++l) {
      const DeviceLayer& layer = model_.layers[l];
      SCORED_RETURN_IF_ERROR(
          AttentionBlock(layer, static_cast<int64_t>(l), l > 0 ? RowSum::kAfterDown : RowSum::kNone));
      SCORED_RETURN_IF_ERROR(layer.sparse ? MoeBlock(layer) : MlpBlock(layer));
    }
    NormOutput<T> final_out = NormInto(false);
    if (role_ == PassRole::kReference) final_out.normed = acts_->ref_normed.as<T>();
    for (int c = 0; c < num_chunks(); ++c) {
      SCORED_RETURN_IF_ERROR(OpenNorm(model_.final_norm, Summed(RowSum::kAfterDown), c, chunks_[c],
                                      final_out));  // normed (or ref_normed) [n, hidden]
    }
    SCORED_RETURN_IF_ERROR(Mark("final norm"));
    if (role_ == PassRole::kReference) return absl::OkStatus();
    SCORED_RETURN_IF_ERROR(LmHead());
    return Mark("lm_head + logprobs");
  }

 private:
  static constexpr bool kFp32 = std::is_same_v<T, float>;

  // residual [n, hidden] = the embedding rows of the tokens (tp: the sum over ranks of their vocabulary
  // rows').
  // Gemma: times the normalizer sqrt(hidden_size), in the compute dtype as transformers does (bf16: a bf16
  // normalizer and the product rounded to bf16; fp32: config.embedding_scale).
  absl::Status Embed() {
    if (tp_ == nullptr) {
      SCORED_RETURN_IF_ERROR((kernels::Embedding<T, float>(model_.embed.as<T>(), tokens_, n_, vocab_, hidden_,
                                                           residual_, stream_)));
    } else {
      SCORED_RETURN_IF_ERROR((
          kernels::EmbeddingShard<T, float>(model_.embed.as<T>(), tokens_, n_, tp_->vocab_size,
                                            tp_->vocab_begin, tp_->vocab_rows, hidden_, residual_, stream_)));
      SCORED_RETURN_IF_ERROR(sums_.AllReduceResidual(n_));
    }
    if (config_.embedding_scale <= 0.0f) return absl::OkStatus();
    const float scale = kFp32 ? config_.embedding_scale : RoundedToBf16(config_.embedding_scale);
    return kernels::ScaleEmbedding(residual_, n_ * hidden_, scale, !kFp32, stream_);
  }

  // The norm that opens a block (or the final norm) of chunk c: the residual rows' once `sum` is in, or in
  // the Gemma block (sandwich norms), after the first layer's input norm, first the previous block's normed
  // output, pending in proj (proj_pending_; the block runs in one row chunk), added into the residual in fp32
  // in the same kernel.
  absl::Status OpenNorm(const DeviceBuffer& weight, RowSum sum, int c, const RowChunk& ch,
                        const NormOutput<T>& out) {
    if (!proj_pending_) return sums_.Norm<T>(weight.as<float>(), eps_, sum, c, ch, out);
    if (out.to_fp8 || num_chunks() != 1) {
      return absl::InternalError("the Gemma block's norms run in one row chunk without an FP8-fed input");
    }
    proj_pending_ = false;
    const int64_t b = ch.begin * hidden_;
    return kernels::AddRmsNorm<float, T>(proj_ + b, hidden_, residual_ + b, weight.as<float>(), ch.rows,
                                         hidden_, eps_, out.normed + b, hidden_, stream_);
  }

  // A row-parallel linear's output (o_proj, down_proj) of chunk c from x: it joins the residual in the GEMM's
  // epilogue (tp: rank 0 adds its partial product, the others write theirs) and `sum` starts the rows' sum
  // over ranks. The Gemma block instead: proj = post_norm(x . W^T) in fp32, added into the residual by the
  // next OpenNorm; at tp 1 over the input column halves into zeroed proj ((0 + x_a . W_a^T) + x_b . W_b^T,
  // SumsInHalves), at tp > 1 each rank's partial product in proj, all-reduced: the same sum bit for bit.
  absl::Status RowParallelOut(const WeightStream::Lease& w, T* x, LinearInOut io,
                              const DeviceBuffer& post_norm, RowSum sum, int c, const RowChunk& ch) {
    io.sum_in_halves = InHalves(*w.linear);
    if (!config_.sandwich_norms) {
      io.add_to_output = add_to_residual_;
      SCORED_RETURN_IF_ERROR(Linear(w, x, residual_, to_fp32_, io, ch));
      return sums_.Reduce(sum, c, ch);
    }
    float* rows = proj_ + ch.begin * hidden_;  // [m, hidden]
    io.add_to_output = io.sum_in_halves;
    if (io.add_to_output) {
      SCORED_CUDA_CHECK(cudaMemsetAsync(rows, 0, ch.rows * hidden_ * sizeof(float), stream_));
    }
    SCORED_RETURN_IF_ERROR(Linear(w, x, proj_, to_fp32_, io, ch));
    if (tp_ != nullptr) {
      SCORED_RETURN_IF_ERROR(
          tp_->comm->AllReduceSum(rows, rows, ch.rows * hidden_, dist::ReduceDType::kF32, stream_));
    }
    proj_pending_ = true;
    return kernels::RmsNorm<float, float>(rows, hidden_, post_norm.as<float>(), ch.rows, hidden_, eps_, rows,
                                          hidden_, stream_);
  }

  // The one cos/sin table that rotates every token of the layer (the local one for Gemma's sliding layers),
  // or nullptr where longrope picks a table per sequence.
  const float* OneRopeTable(int64_t layer) const {
    if (config_.LocalRope(layer)) return rope_local_;
    return config_.rope_scaling.type != RopeType::kLongrope ? rope_table_ : nullptr;
  }

  // RoPE of chunk ch's q and k heads with layer `layer`'s table: the local layers' (Gemma 3) or the model's;
  // under longrope each sequence with the table of its own length (long_factor beyond
  // original_max_position_embeddings), one call per run of sequences of the same kind.
  absl::Status ApplyRope(int64_t layer, T* qkv_rows, const RowChunk& ch) {
    const int64_t heads = num_heads_ + num_kv_heads_;
    if (const float* table = OneRopeTable(layer); table != nullptr) {
      return kernels::RopeWithTable<T>(qkv_rows, qkv_dim_, positions_ + ch.begin, table, acts_->max_tokens,
                                       ch.rows, heads, head_dim_, rotary_dim_, stream_);
    }
    const std::vector<int32_t>& cu = batch_.cu_seqlens;
    const int64_t original = config_.rope_scaling.original_max_position_embeddings;
    auto is_long = [&](int s) { return cu[s + 1] - cu[s] > original; };
    for (int s = ch.first_seq; s < ch.first_seq + ch.num_seqs;) {
      int e = s + 1;
      while (e < ch.first_seq + ch.num_seqs && is_long(e) == is_long(s)) ++e;
      const int64_t begin = cu[s], rows = cu[e] - cu[s];
      SCORED_RETURN_IF_ERROR(kernels::RopeWithTable<T>(
          qkv_ + begin * qkv_dim_, qkv_dim_, positions_ + begin, is_long(s) ? rope_long_ : rope_table_,
          acts_->max_tokens, rows, heads, head_dim_, rotary_dim_, stream_));
      s = e;
    }
    return absl::OkStatus();
  }

  // Qwen3's q / k norm (where the layer has one) and RoPE on the chunk's q|k heads: one fused pass
  // (kernels::QkNormRope, bitwise the two) where the rotation reads one table over whole heads, else the
  // norms then ApplyRope.
  absl::Status QkNormAndRope(const DeviceLayer& layer, int64_t l, T* qkv_rows, const RowChunk& ch) {
    const float* const table = OneRopeTable(l);
    if (layer.q_norm.data() != nullptr && table != nullptr && rotary_dim_ == head_dim_ &&
        kernels::QkNormRopeSupports(head_dim_)) {
      return kernels::QkNormRope<T>(qkv_rows, qkv_dim_, layer.q_norm.as<float>(), layer.k_norm.as<float>(),
                                    positions_ + ch.begin, table, acts_->max_tokens, ch.rows, num_heads_,
                                    num_kv_heads_, head_dim_, eps_, stream_);
    }
    if (layer.q_norm.data() != nullptr) {
      SCORED_RETURN_IF_ERROR(kernels::QkNorm<T>(qkv_rows, qkv_dim_, layer.q_norm.as<float>(), ch.rows,
                                                num_heads_, head_dim_, eps_, stream_));
      SCORED_RETURN_IF_ERROR(kernels::QkNorm<T>(qkv_rows + q_dim_, qkv_dim_, layer.k_norm.as<float>(),
                                                ch.rows, num_kv_heads_, head_dim_, eps_, stream_));
    }
    return ApplyRope(l, qkv_rows, ch);
  }

  // Chunk by chunk: norm, q|k|v, bias / q-k norm, RoPE, attention over the chunk's sequences, o_proj joining
  // the residual, then the chunk's sum over ranks. input_sum: the sum the input norm awaits.
  absl::Status AttentionBlock(const DeviceLayer& layer, int64_t l, RowSum input_sum) {
    const bool qkv_fp8 = norm_fp8_ok_ && FedFp8(layer.qkv);
    LinearInOut qkv_io;
    qkv_io.fp8_input_scales = qkv_fp8 ? fp8_scale_norm_ : nullptr;
    SCORED_ASSIGN_OR_RETURN(const WeightStream::Lease qkv_w, weights_.Acquire(layer.qkv));
    SCORED_ASSIGN_OR_RETURN(const WeightStream::Lease o_w, weights_.Acquire(layer.o));
    kernels::AttentionShape shape;
    shape.num_heads = static_cast<int32_t>(num_heads_);
    shape.num_kv_heads = static_cast<int32_t>(num_kv_heads_);
    shape.head_dim = static_cast<int32_t>(head_dim_);
    shape.q_stride = qkv_dim_;
    shape.kv_stride = qkv_dim_;
    shape.scale = static_cast<float>(config_.attention_scale);
    shape.softcap = config_.attn_logit_softcap;
    shape.window = static_cast<int32_t>(config_.LayerWindow(l));
    for (int c = 0; c < num_chunks(); ++c) {
      const RowChunk& ch = chunks_[c];
      const int64_t b = ch.begin, m = ch.rows;
      // normed [n, hidden] (or act_fp8 / fp8_scale_norm), then qkv [n, qkv_dim]
      SCORED_RETURN_IF_ERROR(OpenNorm(layer.input_norm, input_sum, c, ch, NormInto(qkv_fp8)));
      SCORED_RETURN_IF_ERROR(Mark("norm"));
      SCORED_RETURN_IF_ERROR(Linear(qkv_w, normed_, qkv_, types_, qkv_io, ch));
      SCORED_RETURN_IF_ERROR(Mark("qkv GEMM"));
      if (c == num_chunks() - 1) SCORED_RETURN_IF_ERROR(weights_.Release(qkv_w));
      T* qkv_rows = qkv_ + b * qkv_dim_;  // [m, qkv_dim]
      if (layer.qkv_bias.data() != nullptr) {
        SCORED_RETURN_IF_ERROR(
            kernels::BiasAdd<T>(qkv_rows, qkv_dim_, layer.qkv_bias.as<float>(), m, qkv_dim_, stream_));
      }
      SCORED_RETURN_IF_ERROR(QkNormAndRope(layer, l, qkv_rows, ch));
      if (layer.k_scale > 0.0f) {  // FP8 KV cache: post-RoPE K and V quantize-dequantized per tensor
        const int64_t kv_dim = (qkv_dim_ - q_dim_) / 2;
        SCORED_RETURN_IF_ERROR(kernels::FakeQuantizeFp8Static<T>(qkv_rows + q_dim_, qkv_dim_, m, kv_dim,
                                                                 layer.k_scale, stream_));
        SCORED_RETURN_IF_ERROR(kernels::FakeQuantizeFp8Static<T>(qkv_rows + q_dim_ + kv_dim, qkv_dim_, m,
                                                                 kv_dim, layer.v_scale, stream_));
      }
      // attn [n, q_dim] over the chunk's sequences: cu_seqlens holds absolute rows, so q / k / v / attn stay
      // the batch's.
      shape.num_tokens = m;
      shape.num_seqs = ch.num_seqs;
      shape.max_seqlen = ch.max_seqlen;
      SCORED_RETURN_IF_ERROR(Mark("bias, q/k norm, rope"));
      SCORED_RETURN_IF_ERROR(
          kernels::CausalAttention<T>(q_, k_, v_, cu_seqlens_ + ch.first_seq, shape, attn_, stream_));
      SCORED_RETURN_IF_ERROR(Mark("attention"));
      // residual [n, hidden] += attn . W_o^T (tp: this rank's partial product), then its sum over ranks (the
      // Gemma block: proj = post_attention_norm(attn . W_o^T))
      SCORED_RETURN_IF_ERROR(
          RowParallelOut(o_w, attn_, LinearInOut{}, layer.post_norm, RowSum::kAfterO, c, ch));
      if (c == num_chunks() - 1) SCORED_RETURN_IF_ERROR(weights_.Release(o_w));
      SCORED_RETURN_IF_ERROR(Mark("o GEMM"));
    }
    return absl::OkStatus();
  }

  // Chunk by chunk: norm, gate|up, SwiGLU, down_proj joining the residual, then the chunk's sum over ranks.
  absl::Status MlpBlock(const DeviceLayer& layer) {
    const bool gate_up_fp8 = norm_fp8_ok_ && FedFp8(layer.gate_up);
    const bool swiglu_fp8 = swiglu_fp8_ok_ && layer.gate_up.fp8_resident() &&
                            layer.gate_up.output_rotations().empty() && FedFp8(layer.down);
    LinearInOut gate_up_io;
    gate_up_io.fp8_input_scales = gate_up_fp8 ? fp8_scale_norm_ : nullptr;
    gate_up_io.unscaled_fp8_output = swiglu_fp8;
    LinearInOut down_io;
    down_io.fp8_input_scales = swiglu_fp8 ? fp8_scale_mlp_ : nullptr;
    // The MLP's input norm: post_attention_layernorm, or the Gemma block's pre_feedforward_layernorm.
    const DeviceBuffer& input_norm = config_.sandwich_norms ? layer.pre_ff_norm : layer.post_norm;
    SCORED_ASSIGN_OR_RETURN(const WeightStream::Lease gate_up_w, weights_.Acquire(layer.gate_up));
    SCORED_ASSIGN_OR_RETURN(const WeightStream::Lease down_w, weights_.Acquire(layer.down));
    for (int c = 0; c < num_chunks(); ++c) {
      const RowChunk& ch = chunks_[c];
      const int64_t b = ch.begin, m = ch.rows;
      // normed [n, hidden] (or act_fp8 / fp8_scale_norm), then gate_up [n, 2 inter]
      SCORED_RETURN_IF_ERROR(OpenNorm(input_norm, Summed(RowSum::kAfterO), c, ch, NormInto(gate_up_fp8)));
      SCORED_RETURN_IF_ERROR(Mark("norm"));
      SCORED_RETURN_IF_ERROR(Linear(gate_up_w, normed_, gate_up_, types_, gate_up_io, ch));
      if (c == num_chunks() - 1) SCORED_RETURN_IF_ERROR(weights_.Release(gate_up_w));
      SCORED_RETURN_IF_ERROR(Mark("gate|up GEMM"));
      T* gate_up_rows = gate_up_ + b * 2 * inter_;  // [m, 2 inter]
      // mlp [n, inter] = silu(gate) * up (or down_proj's FP8 input act_fp8 / fp8_scale_mlp)
      if (swiglu_fp8) {
        if constexpr (!kFp32) {
          // gate_up's raw FP8 GEMM output: its scales, SwiGLU and down_proj's input quantization in one pass.
          SCORED_ASSIGN_OR_RETURN(
              const bool scaled,
              gemm_.Fp8ScalesInEpilogue(layer.gate_up.out_features(), hidden_, GemmTypes::kFp8ToBf16));
          SCORED_RETURN_IF_ERROR(kernels::SwiGluQuantFp8(gate_up_rows, m, inter_,
                                                         scaled ? nullptr : fp8_scale_norm_ + b,
                                                         scaled ? nullptr : layer.gate_up.fp8_scale(),
                                                         act_fp8_ + b * inter_, fp8_scale_mlp_ + b, stream_));
        }
      } else if (config_.mlp_activation == MlpActivation::kGeluTanh) {
        SCORED_RETURN_IF_ERROR(kernels::GeluTanhGlu<T>(gate_up_rows, gate_up_rows + inter_, 2 * inter_, m,
                                                       inter_, mlp_ + b * inter_, stream_));
      } else {
        SCORED_RETURN_IF_ERROR(kernels::SwiGlu<T>(gate_up_rows, gate_up_rows + inter_, 2 * inter_, m, inter_,
                                                  mlp_ + b * inter_, stream_));
      }
      SCORED_RETURN_IF_ERROR(Mark("swiglu"));
      // residual [n, hidden] += mlp . W_down^T (tp: this rank's partial product), then its sum over ranks
      // (the Gemma block: proj = post_feedforward_norm(mlp . W_down^T))
      SCORED_RETURN_IF_ERROR(
          RowParallelOut(down_w, mlp_, down_io, layer.post_ff_norm, RowSum::kAfterDown, c, ch));
      if (c == num_chunks() - 1) SCORED_RETURN_IF_ERROR(weights_.Release(down_w));
      SCORED_RETURN_IF_ERROR(Mark("down GEMM"));
    }
    return absl::OkStatus();
  }

  // A sparse layer (DeviceMoe; config.h has the semantics), one chunk (tensor parallelism: the rank's slice
  // of every expert, shard_plan.h): norm, the router's fp32 logits, the routing, the slots grouped by expert,
  // then the experts (as grouped GEMMs where DeviceMoe::grouped is enabled, RunGroupedExperts; else one by
  // one in ascending id, ExpertsOneByOne) weighted and summed per token in ascending expert id, the shared
  // expert, and their sum into the residual (kernels/moe_combine.h: the oracle's order of fp32 adds). An
  // expert's output rows are in the compute dtype (bf16 mode: rounded to bf16 once, as transformers' are;
  // the weighted sum and everything after it stay fp32); the shared expert's are fp32 like a dense MLP's. A
  // token's rows are computed with the GEMM algorithm pinned for the expert's shape whatever the row count
  // (the grouped kernel: one fixed k order per output element), so its result does not depend on the rest of
  // the batch.
  absl::Status MoeBlock(const DeviceLayer& layer) {
    if (num_chunks() != 1) return absl::InternalError("a mixture-of-experts layer runs in one row chunk");
    const DeviceMoe& moe = layer.moe;
    const int64_t experts = config_.num_experts, k = config_.num_experts_per_tok;
    SCORED_RETURN_IF_ERROR(sums_.Norm<T>(layer.post_norm.as<float>(), eps_, Summed(RowSum::kAfterO), 0,
                                         chunks_[0], NormInto(false)));  // normed [n, hidden]
    SCORED_RETURN_IF_ERROR(Mark("norm"));
    RowChunk all;
    all.rows = n_;
    float* const logits = acts_->router_logits.as<float>();  // [n, columns]
    const int64_t columns = moe.router.out_features();
    int32_t* const ids = acts_->moe_ids.as<int32_t>();      // [n, k]
    float* const weights = acts_->moe_weights.as<float>();  // [n, k]
    int32_t* const slots = acts_->moe_slots.as<int32_t>();  // [n * k]
    float* const acc = acts_->moe_acc.as<float>();          // [n, hidden]
    SCORED_ASSIGN_OR_RETURN(const WeightStream::Lease router_w, weights_.Acquire(moe.router));
    SCORED_RETURN_IF_ERROR(Linear(router_w, normed_, logits, to_fp32_, LinearInOut{}, all));
    SCORED_RETURN_IF_ERROR(weights_.Release(router_w));
    SCORED_RETURN_IF_ERROR(Mark("router GEMM"));
    SCORED_RETURN_IF_ERROR(
        kernels::MoeRoute(logits, columns, n_, experts, k, config_.norm_topk_prob, ids, weights, stream_));
    SCORED_RETURN_IF_ERROR(Mark("moe route"));
    // the grouped path's expert offsets too ([experts + 1], on the device)
    int32_t* const offsets = moe.grouped.enabled ? acts_->moe_offsets.as<int32_t>() : nullptr;
    SCORED_RETURN_IF_ERROR(kernels::MoeGroupByExpert(ids, n_ * k, experts, acts_->moe_counts.as<int32_t>(),
                                                     slots, offsets, acts_->moe_group_workspace.data(),
                                                     acts_->moe_group_workspace.bytes(), stream_));
    SCORED_RETURN_IF_ERROR(Mark("moe group by expert"));
    // residual += acc (+ sigmoid(gate) * shared); the gate's logit is the router output's column `experts`.
    // Tensor parallelism: acc and shared are the rank's partial sums (its slice of every expert); rank 0 adds
    // them to the residual, the others write them over it (0 + ...), and the sum over ranks completes it.
    const float* const gate = logits + experts;
    if (moe.grouped.enabled) {  // the shared expert first: the grouped combine ends in the residual
      SCORED_ASSIGN_OR_RETURN(const float* shared, SharedExpert(moe));
      SCORED_RETURN_IF_ERROR(RunGroupedExperts(moe, slots, weights, shared, gate, columns));
    } else {
      SCORED_RETURN_IF_ERROR(ExpertsOneByOne(moe, slots, weights, acc));
      SCORED_RETURN_IF_ERROR(Mark("experts one by one"));
      SCORED_ASSIGN_OR_RETURN(const float* shared, SharedExpert(moe));
      if (!add_to_residual_)
        SCORED_CUDA_CHECK(cudaMemsetAsync(residual_, 0, n_ * hidden_ * sizeof(float), stream_));
      SCORED_RETURN_IF_ERROR(kernels::MoeFinish(acc, shared, gate, columns, n_, hidden_, residual_, stream_));
    }
    SCORED_RETURN_IF_ERROR(sums_.Reduce(RowSum::kAfterDown, 0, chunks_[0]));
    return Mark("moe finish");
  }

  // The shared expert's output (Qwen2-MoE) [n, hidden] fp32 in moe_shared, or nullptr where the layer has
  // none.
  absl::StatusOr<const float*> SharedExpert(const DeviceMoe& moe) {
    if (!moe.shared) return nullptr;
    SCORED_ASSIGN_OR_RETURN(const WeightStream::Lease gate_up_w, weights_.Acquire(moe.shared_gate_up));
    SCORED_ASSIGN_OR_RETURN(const WeightStream::Lease down_w, weights_.Acquire(moe.shared_down));
    float* const shared = acts_->moe_shared.as<float>();
    SCORED_RETURN_IF_ERROR(ExpertMlp(gate_up_w, down_w, normed_, n_, shared, to_fp32_));
    SCORED_RETURN_IF_ERROR(weights_.Release(gate_up_w));
    SCORED_RETURN_IF_ERROR(weights_.Release(down_w));
    SCORED_RETURN_IF_ERROR(Mark("shared expert"));
    return shared;
  }

  // acc [n, hidden] = every token's experts' outputs weighted and summed in ascending expert id, one expert
  // at a time: the counts copied to the host (the expert GEMMs' row counts; the one host synchronization of
  // the layer), then per expert its gathered rows' MLP accumulated (kernels::MoeAccumulate).
  absl::Status ExpertsOneByOne(const DeviceMoe& moe, const int32_t* slots, const float* weights, float* acc) {
    const int64_t experts = config_.num_experts, k = config_.num_experts_per_tok;
    std::vector<int32_t> counts(static_cast<size_t>(experts));
    SCORED_CUDA_CHECK(cudaMemcpyAsync(counts.data(), acts_->moe_counts.data(), experts * sizeof(int32_t),
                                      cudaMemcpyDeviceToHost, stream_));
    SCORED_CUDA_CHECK(cudaStreamSynchronize(stream_));
    SCORED_CUDA_CHECK(cudaMemsetAsync(acc, 0, n_ * hidden_ * sizeof(float), stream_));
    int64_t offset = 0;
    for (int64_t e = 0; e < experts; ++e) {  // every expert's lease, in order, even one with no tokens
      SCORED_ASSIGN_OR_RETURN(const WeightStream::Lease gate_up_w, weights_.Acquire(moe.gate_up[e]));
      SCORED_ASSIGN_OR_RETURN(const WeightStream::Lease down_w, weights_.Acquire(moe.down[e]));
      const int64_t m = counts[e];
      if (m > 0) {
        const int32_t* expert_slots = slots + offset;
        T* const x = acts_->moe_x.as<T>();  // [m, hidden]
        T* const y = acts_->moe_y.as<T>();  // [m, hidden]
        SCORED_RETURN_IF_ERROR(
            kernels::MoeGatherRows<T>(normed_, hidden_, expert_slots, m, k, hidden_, x, stream_));
        SCORED_RETURN_IF_ERROR(ExpertMlp(gate_up_w, down_w, x, m, y, types_));
        SCORED_RETURN_IF_ERROR(kernels::MoeAccumulate(y, expert_slots, m, k, weights, hidden_, acc, stream_));
      }
      SCORED_RETURN_IF_ERROR(weights_.Release(gate_up_w));
      SCORED_RETURN_IF_ERROR(weights_.Release(down_w));
      offset += m;
    }
    return absl::OkStatus();
  }

  // The same sum from the grouped tables (DeviceMoe::grouped; bf16 mode), every expert at once and nothing
  // copied to the host: the expert offsets and each slot's row on the device, all n * k slot rows gathered
  // once, one grouped gate|up GEMM, one SwiGLU, one grouped down GEMM to bf16, then every token's k rows
  // combined in ascending expert id straight into the residual with the shared expert (shared, its gate
  // logits gate with stride gate_stride; kernels::MoeCombineGroupedFinish: the adds of ExpertsOneByOne and
  // MoeFinish, in their order). The experts are not in the WeightStream's order (LinearsInOrder skips them):
  // no lease.
  absl::Status RunGroupedExperts(const DeviceMoe& moe, const int32_t* slots, const float* weights,
                                 const float* shared, const float* gate, int64_t gate_stride) {
    if constexpr (kFp32) {
      return absl::InternalError("grouped expert GEMMs run in bf16 mode only");
    } else {
      const GroupedExperts& g = moe.grouped;
      const int64_t experts = config_.num_experts, k = config_.num_experts_per_tok, rows = n_ * k;
      const int64_t inter = moe.down[0].in_features();                // the rank's slice (tensor parallelism)
      int32_t* const offsets = acts_->moe_offsets.as<int32_t>();      // [experts + 1]
      int32_t* const slot_rows = acts_->moe_slot_rows.as<int32_t>();  // [rows]
      bf16_t* const in = acts_->moe_grouped_in.as<bf16_t>();          // [rows, hidden], then [rows, inter]
      bf16_t* const gate_up = acts_->moe_grouped_gate_up.as<bf16_t>();  // [rows, 2 inter]
      bf16_t* const out = acts_->moe_grouped_out.as<bf16_t>();          // [rows, hidden]
      if (acts_->moe_grouped_gate_up.bytes() < rows * 2 * inter * 2 ||
          acts_->moe_grouped_in.bytes() < rows * std::max(hidden_, inter) * 2 ||
          acts_->moe_grouped_out.bytes() < rows * hidden_ * 2) {
        return absl::InternalError("the grouped experts' activations are smaller than the layer's shapes");
      }
      SCORED_RETURN_IF_ERROR(kernels::MoeGroupedRows(offsets, experts, slots, rows, slot_rows, stream_));
      SCORED_RETURN_IF_ERROR(Mark("moe grouped rows"));
      SCORED_RETURN_IF_ERROR(
          kernels::MoeGatherRows<T>(normed_, hidden_, slots, rows, k, hidden_, in, stream_));
      SCORED_RETURN_IF_ERROR(Mark("moe gather"));
      kernels::GroupedGemmShape up_shape;
      up_shape.num_experts = experts;
      up_shape.rows = rows;
      up_shape.n = 2 * inter;
      up_shape.k = hidden_;
      up_shape.ldx = hidden_;
      up_shape.ldy = 2 * inter;
      kernels::GroupedGemmShape down_shape = up_shape;
      down_shape.n = hidden_;
      down_shape.k = inter;
      down_shape.ldx = inter;
      down_shape.ldy = hidden_;
      SCORED_RETURN_IF_ERROR(
          GroupedExpertGemm<bf16_t>(g, g.gate_up, g.gate_up_format, in, up_shape, gate_up));
      SCORED_RETURN_IF_ERROR(Mark("expert gate|up GEMM"));
      SCORED_RETURN_IF_ERROR(
          kernels::SwiGlu<T>(gate_up, gate_up + inter, 2 * inter, rows, inter, in, stream_));
      SCORED_RETURN_IF_ERROR(Mark("expert swiglu"));
      SCORED_RETURN_IF_ERROR(GroupedExpertGemm<bf16_t>(g, g.down, g.down_format, in, down_shape, out));
      SCORED_RETURN_IF_ERROR(Mark("expert down GEMM"));
      SCORED_RETURN_IF_ERROR(kernels::MoeCombineGroupedFinish(out, slot_rows, weights, n_, k, hidden_, shared,
                                                              gate, gate_stride, add_to_residual_, residual_,
                                                              stream_));
      return Mark("moe combine");
    }
  }

  // One grouped GEMM of RunGroupedExperts (table: g.gate_up or g.down, format its 4-bit format) on the
  // layer's path (GroupedExperts::path): mma.sync, the Hopper kernel over the dense tables, or the 4-bit
  // experts dequantized into moe_grouped_stacked then the Hopper kernel. The workspace and the stacked
  // scratch are reused by the next GEMM only after this one on the same stream.
  template <typename OutT>
  absl::Status GroupedExpertGemm(const GroupedExperts& g, const DeviceBuffer& table,
                                 const kernels::GroupedInt4Format& format, const bf16_t* x,
                                 const kernels::GroupedGemmShape& shape, OutT* y) {
    void* const ws = acts_->moe_grouped_workspace.data();
    const int64_t ws_bytes = acts_->moe_grouped_workspace.bytes();
    switch (g.path) {
      case GroupedGemmPath::kMma:
        break;
      case GroupedGemmPath::kSm90:
        if (g.int4) return absl::InternalError("the sm90 grouped path reads dense experts only");
        return kernels::GroupedGemmSm90<OutT>(x, acts_->moe_offsets.as<int32_t>(), table.as<const bf16_t*>(),
                                              shape, y, ws, ws_bytes, stream_, g.sm90_schedule);
      case GroupedGemmPath::kSm90Dequant: {
        if (!g.int4) return absl::InternalError("the sm90_dequant grouped path reads 4-bit experts only");
        bf16_t* const stacked = acts_->moe_grouped_stacked.as<bf16_t>();
        if (acts_->moe_grouped_stacked.bytes() < shape.num_experts * shape.n * shape.k * 2) {
          return absl::InternalError("the dequantized experts' scratch is smaller than the layer's experts");
        }
        SCORED_RETURN_IF_ERROR(kernels::DequantizeGroupedInt4(
            table.as<kernels::GroupedInt4Expert>(), acts_->moe_offsets.as<int32_t>(), format,
            shape.num_experts, shape.n, shape.k, stacked, stream_));
        SCORED_RETURN_IF_ERROR(Mark("expert dequant"));
        return kernels::GroupedGemmSm90Stacked<OutT>(x, acts_->moe_offsets.as<int32_t>(), stacked, shape, y,
                                                     ws, ws_bytes, stream_, g.sm90_schedule);
      }
    }
    if (g.int4) {
      return kernels::GroupedGemmInt4<OutT>(x, acts_->moe_offsets.as<int32_t>(),
                                            table.as<kernels::GroupedInt4Expert>(), format, shape, y,
                                            stream_);
    }
    return kernels::GroupedGemm<OutT>(x, acts_->moe_offsets.as<int32_t>(), table.as<const bf16_t*>(), shape,
                                      y, stream_);
  }

  // y [m, hidden] = down(silu(gate(x)) * up(x)) for x [m, hidden] (gate_up_ / mlp_ as scratch), y_types's
  // output: fp32 (to_fp32_: the shared expert) or the compute dtype (types_: a routed expert, kernels/
  // moe_combine.h).
  absl::Status ExpertMlp(const WeightStream::Lease& gate_up_w, const WeightStream::Lease& down_w, T* x,
                         int64_t m, void* y, GemmTypes y_types) {
    RowChunk rows;
    rows.rows = m;
    const int64_t inter = gate_up_w.linear->out_features() / 2;
    // GEMM algorithms chosen for an expert's usual row count (max_tokens * top_k / num_experts), not
    // max_tokens: tiles sized for 16k rows leave most of the GPU idle on an expert's ~1k.
    LinearInOut io;
    io.plan_rows = std::max<int64_t>(
        64, acts_->max_tokens * config_.num_experts_per_tok / std::max<int64_t>(config_.num_experts, 1));
    SCORED_RETURN_IF_ERROR(Linear(gate_up_w, x, gate_up_, types_, io, rows));
    SCORED_RETURN_IF_ERROR(
        kernels::SwiGlu<T>(gate_up_, gate_up_ + inter, 2 * inter, m, inter, mlp_, stream_));
    return Linear(down_w, mlp_, y, y_types, io, rows);
  }

  // lm_head in chunks of rows: fp32 logits into the reusable chunk, then the per-row statistics.
  // Tensor parallelism: the logits of the rank's vocabulary rows [rows, head_rows] (leading dimension
  // head_rows), combined across ranks by per-token statistics.
  absl::Status LmHead() {
    SCORED_ASSIGN_OR_RETURN(const void* head, model_.lm_head.Materialize(model_.dtype, nullptr, stream_));
    const int64_t head_rows = model_.lm_head.out_features();
    const int64_t chunk = acts_->logits_rows;
    const int64_t top_k = batch_.options.top_k;
    const bool compare = reference_ != nullptr && batch_.options.want_reference;
    for (const RowSpan& span : batch_.lm_head_rows) {
      for (int64_t begin = span.begin; begin < span.end; begin += chunk) {
        const int64_t rows = std::min(chunk, span.end - begin);
        // logits [rows, head_rows] = normed rows . W_head^T
        SCORED_RETURN_IF_ERROR(gemm_.Linear(normed_ + begin * hidden_, head, logits_, rows, head_rows,
                                            hidden_, to_fp32_, stream_));
        if (config_.final_logit_softcap > 0.0f) {  // Gemma 2
          SCORED_RETURN_IF_ERROR(
              kernels::SoftCap(logits_, rows, head_rows, head_rows, config_.final_logit_softcap, stream_));
        }
        kernels::LogprobOutputs out;
        out.logprob = acts_->logprob.as<double>() + begin;                       // [rows]
        out.greedy = acts_->greedy.as<uint8_t>() + begin;                        // [rows]
        out.rank = acts_->rank.as<int32_t>() + begin;                            // [rows]
        out.entropy = acts_->entropy.as<float>() + begin;                        // [rows]
        out.top_k_ids = acts_->top_k_ids.as<int32_t>() + begin * top_k;          // [rows, top_k]
        out.top_k_logprobs = acts_->top_k_logprobs.as<float>() + begin * top_k;  // [rows, top_k]
        if (tp_ == nullptr) {
          SCORED_RETURN_IF_ERROR(kernels::ScoreLogits(logits_, vocab_, targets_ + begin, rows, vocab_,
                                                      batch_.options, out, stream_));
        } else {
          SCORED_RETURN_IF_ERROR(dist::VocabParallelScore(
              *tp_->comm, logits_, head_rows, head_rows, tp_->vocab_begin, targets_ + begin, rows,
              batch_.options, acts_->tp_stats.as<kernels::LogitPartialStats>(),
              acts_->tp_target_logit.as<float>(), acts_->tp_topk_ids.as<int32_t>(),
              acts_->tp_topk_values.as<float>(), out, stream_));
        }
        if (compare) SCORED_RETURN_IF_ERROR(CompareWithReference(begin, rows));
      }
    }
    return absl::OkStatus();
  }

  // The reference model's logits of rows [begin, begin + rows) from its final normed rows, then the fused
  // comparison with this model's logits of the same rows (logits_, just written).
  absl::Status CompareWithReference(int64_t begin, int64_t rows) {
    const DeviceModel& ref = *reference_->model;
    SCORED_ASSIGN_OR_RETURN(const void* head, ref.lm_head.Materialize(ref.dtype, nullptr, stream_));
    const int64_t ref_hidden = reference_->config->hidden_size, head_rows = ref.lm_head.out_features();
    float* ref_logits = acts_->ref_logits.as<float>();  // [rows, head_rows]
    // ref_logits [rows, head_rows] = R's normed rows . R's W_head^T
    SCORED_RETURN_IF_ERROR(gemm_.Linear(acts_->ref_normed.as<T>() + begin * ref_hidden, head, ref_logits,
                                        rows, head_rows, ref_hidden, to_fp32_, stream_));
    if (reference_->config->final_logit_softcap > 0.0f) {
      SCORED_RETURN_IF_ERROR(kernels::SoftCap(ref_logits, rows, head_rows, head_rows,
                                              reference_->config->final_logit_softcap, stream_));
    }
    kernels::ReferenceOutputs out;
    out.ref_logprob = acts_->ref_logprob.as<double>() + begin;  // [rows]
    out.kld = acts_->kld.as<double>() + begin;                  // [rows]
    out.ref_greedy = acts_->ref_greedy.as<uint8_t>() + begin;   // [rows]
    out.same_top = acts_->same_top.as<uint8_t>() + begin;       // [rows]
    auto* stats = acts_->ref_stats.as<kernels::ReferencePartialStats>();
    const int64_t q_rows = model_.lm_head.out_features();
    if (tp_ == nullptr) {
      return kernels::CompareWithReference(ref_logits, head_rows, logits_, q_rows, targets_ + begin, rows,
                                           vocab_, stats, out, stream_);
    }
    return dist::VocabParallelCompare(*tp_->comm, ref_logits, head_rows, logits_, q_rows, q_rows,
                                      tp_->vocab_begin, targets_ + begin, rows, stats, out, stream_);
  }

  // y[rows, out] = x[rows, in] . W^T on chunk ch's rows (io.add_to_output: y += x . W^T). W8A8 resident in
  // FP8 (bf16 mode, per-token activations): Fp8Linear. Other W8A8 (fp32 mode, per-group activations, shapes
  // FP8 GEMMs cannot take): x is fake-quantized to FP8 first, one scale per token or per act_group_size
  // columns of a token (x is contiguous, so a group is a row of the [rows * in / group, group] view), then
  // the bf16 / fp32 GEMM runs on the dequantized weight.
  absl::Status Linear(const WeightStream::Lease& use, T* x, void* y, GemmTypes y_types, const LinearInOut& io,
                      const RowChunk& ch) {
    const DeviceLinear& w = *use.linear;
    if (w.input_rotations().empty() && w.output_rotations().empty())
      return Product(use, x, y, y_types, io, ch);
    // transform_config's online rotations (device_weights.h DeviceRotation): the input's in place before the
    // product, the outputs' on their parts' columns after it.
    const int64_t m = ch.rows, in = w.in_features(), out = w.out_features();
    for (const DeviceRotation& r : w.input_rotations()) {
      SCORED_RETURN_IF_ERROR(kernels::HadamardRotate<T>(x + ch.begin * in, in, m, r.width, r.view, stream_));
    }
    SCORED_RETURN_IF_ERROR(Product(use, x, y, y_types, io, ch));
    if (w.output_rotations().empty()) return absl::OkStatus();
    if (io.add_to_output || io.unscaled_fp8_output || y_types != types_) {
      return absl::InternalError(
          "an output rotation of a linear whose output is not written in the compute dtype");
    }
    for (const DeviceRotation& r : w.output_rotations()) {
      SCORED_RETURN_IF_ERROR(kernels::HadamardRotate<T>(static_cast<T*>(y) + ch.begin * out + r.col_offset,
                                                        out, m, r.width, r.view, stream_));
    }
    return absl::OkStatus();
  }

  // Linear without the rotations.
  absl::Status Product(const WeightStream::Lease& use, T* x, void* y, GemmTypes y_types,
                       const LinearInOut& io, const RowChunk& ch) {
    const DeviceLinear& w = *use.linear;
    const int64_t m = ch.rows, in = w.in_features(), out = w.out_features();
    const int64_t y_elem = y_types == GemmTypes::kBf16ToBf16 ? 2 : 4;
    T* x_rows = x + ch.begin * in;                                   // [m, in]
    void* y_rows = static_cast<char*>(y) + ch.begin * out * y_elem;  // [m, out]
    if (w.fp8_resident()) return Fp8Linear(w, x_rows, y_rows, y_types, io, ch);
    if (w.int8_resident()) return Int8Linear(w, x_rows, y_rows, y_types, io, ch);
    if (io.fp8_input_scales != nullptr || io.unscaled_fp8_output) {
      return absl::InternalError("FP8 input / output requested of a linear without a real FP8 GEMM");
    }
    if (w.w8a8_dynamic_fp8() && w.act_amax_all_reduce() && tp_ != nullptr) {
      // Row-parallel shard: the token's scale is the amax over every rank's columns.
      float* amax = act_amax_ + ch.begin;
      SCORED_RETURN_IF_ERROR(kernels::Fp8RowAmax<T>(x_rows, in, m, in, amax, stream_));
      SCORED_RETURN_IF_ERROR(
          tp_->comm->AllReduce(amax, amax, m, dist::ReduceDType::kF32, dist::ReduceOp::kMax, stream_));
      SCORED_RETURN_IF_ERROR(kernels::FakeQuantizeFp8PerTokenWithAmax<T>(x_rows, in, m, in, amax, stream_));
    } else if (w.w8a8_dynamic_fp8()) {
      const int64_t group = w.act_group_size() > 0 ? w.act_group_size() : in;
      SCORED_RETURN_IF_ERROR(
          kernels::FakeQuantizeFp8PerToken<T>(x_rows, group, m * (in / group), group, stream_));
    } else if (w.w8a8_dynamic_int8()) {
      SCORED_RETURN_IF_ERROR(Int8FakeQuantize(w, x_rows, ch));
    } else if (w.static_act() == DeviceLinear::StaticAct::kFp8) {
      SCORED_RETURN_IF_ERROR(kernels::FakeQuantizeFp8Static<T>(x_rows, in, m, in, w.static_scale(), stream_));
    } else if (w.static_act() == DeviceLinear::StaticAct::kInt8) {
      SCORED_RETURN_IF_ERROR(kernels::FakeQuantizeInt8Static<T>(x_rows, in, m, in, w.static_scale(),
                                                                w.static_zero_point(), stream_));
    }
    if (io.sum_in_halves) {
      // Two GEMMs over the input column halves, each adding into y (SumsInHalves): tp 2's order of sums.
      const int64_t half = in / 2;
      LinearOptions halves = LinearOptions::AccumulateColumns(in);
      halves.plan_rows = io.plan_rows;
      SCORED_RETURN_IF_ERROR(
          gemm_.Linear(x_rows, use.weight, y_rows, m, out, half, y_types, stream_, halves));
      return gemm_.Linear(x_rows + half, static_cast<const T*>(use.weight) + half, y_rows, m, out, half,
                          y_types, stream_, halves);
    }
    LinearOptions options;
    options.accumulate = io.add_to_output;
    options.plan_rows = io.plan_rows;
    return gemm_.Linear(x_rows, use.weight, y_rows, m, out, in, y_types, stream_, options);
  }

  // W8A8 INT8: x_rows [m, in] quantize-dequantized to int8 per token in place (kernels/int8_quant.h); on a
  // row-parallel shard with each token's (hi, -lo) all-reduced (max) over the ranks first.
  absl::Status Int8FakeQuantize(const DeviceLinear& w, T* x_rows, const RowChunk& ch) {
    const int64_t m = ch.rows, in = w.in_features();
    if (!(w.act_amax_all_reduce() && tp_ != nullptr)) {
      return kernels::FakeQuantizeInt8PerToken<T>(x_rows, in, m, in, w.act_symmetric(), stream_);
    }
    float* range = act_amax_ + 2 * ch.begin;  // [m, 2]
    SCORED_RETURN_IF_ERROR(kernels::Int8RowRange<T>(x_rows, in, m, in, range, stream_));
    SCORED_RETURN_IF_ERROR(
        tp_->comm->AllReduce(range, range, 2 * m, dist::ReduceDType::kF32, dist::ReduceOp::kMax, stream_));
    return kernels::FakeQuantizeInt8PerTokenWithRange<T>(x_rows, in, m, in, w.act_symmetric(), range,
                                                         stream_);
  }

  // INT8 GEMM on int8 tensor cores of chunk ch's rows x_rows [m, in] into y_rows [m, out]
  // (kernels/int8_gemm.h): x quantized per token into act_fp8's bytes (int8) and a per-token scale, on a
  // row-parallel shard with each token's (hi, -lo) all-reduced (max) over the ranks first; with
  // io.add_to_output y (fp32) += the result.
  absl::Status Int8Linear(const DeviceLinear& w, T* x_rows, void* y_rows, GemmTypes y_types,
                          const LinearInOut& io, const RowChunk& ch) {
    if (io.fp8_input_scales != nullptr || io.unscaled_fp8_output) {
      return absl::InternalError("FP8 input / output requested of an INT8 linear");
    }
    const int64_t m = ch.rows, in = w.in_features(), out = w.out_features();
    int8_t* x_q = reinterpret_cast<int8_t*>(act_fp8_ + ch.begin * in);  // [m, in]
    float* scale_rows = fp8_scale_norm_ + ch.begin;                     // [m]
    const float* range = nullptr;
    if (w.act_amax_all_reduce() && tp_ != nullptr) {
      float* r = act_amax_ + 2 * ch.begin;  // [m, 2]
      SCORED_RETURN_IF_ERROR(kernels::Int8RowRange<T>(x_rows, in, m, in, r, stream_));
      SCORED_RETURN_IF_ERROR(
          tp_->comm->AllReduce(r, r, 2 * m, dist::ReduceDType::kF32, dist::ReduceOp::kMax, stream_));
      range = r;
    }
    SCORED_RETURN_IF_ERROR(
        kernels::QuantizeInt8PerToken<T>(x_rows, in, m, in, range, x_q, scale_rows, stream_));
    kernels::Int8GemmOutput output = kernels::Int8GemmOutput::kFp32;
    if (y_types == GemmTypes::kBf16ToBf16) {
      if (io.add_to_output) return absl::InternalError("INT8 accumulation needs an fp32 output");
      output = kernels::Int8GemmOutput::kBf16;
    } else if (io.add_to_output) {
      output = kernels::Int8GemmOutput::kFp32Accumulate;
    }
    return kernels::Int8ScaledGemm(x_q, scale_rows, w.int8_weight(), w.int8_scale(), y_rows, m, out, in,
                                   output, stream_);
  }

  // Real FP8 GEMM of chunk ch's rows x_rows [m, in] into y_rows [m, out]: x quantized per token into act_fp8
  // / a per-token scale (unless a fused kernel did: io.fp8_input_scales); the GEMM applies both scales. With
  // io.add_to_output the GEMM writes proj and AddFp8Scaled joins it to y (fp32).
  absl::Status Fp8Linear(const DeviceLinear& w, T* x_rows, void* y_rows, GemmTypes y_types,
                         const LinearInOut& io, const RowChunk& ch) {
    const int64_t m = ch.rows, in = w.in_features(), out = w.out_features();
    uint8_t* x_fp8 = act_fp8_ + ch.begin * in;       // [m, in]
    float* scale_rows = fp8_scale_norm_ + ch.begin;  // [m]
    const float* x_scale = io.fp8_input_scales != nullptr ? io.fp8_input_scales + ch.begin : nullptr;  // [m]
    if (x_scale == nullptr && w.act_amax_all_reduce() && tp_ != nullptr) {
      // Row-parallel shard: the token's scale is the amax over every rank's columns.
      float* amax = act_amax_ + ch.begin;
      SCORED_RETURN_IF_ERROR(kernels::Fp8RowAmax<T>(x_rows, in, m, in, amax, stream_));
      SCORED_RETURN_IF_ERROR(
          tp_->comm->AllReduce(amax, amax, m, dist::ReduceDType::kF32, dist::ReduceOp::kMax, stream_));
      SCORED_RETURN_IF_ERROR(
          kernels::QuantizeFp8PerTokenWithAmax<T>(x_rows, in, m, in, amax, x_fp8, scale_rows, stream_));
      x_scale = scale_rows;
    } else if (x_scale == nullptr) {
      SCORED_RETURN_IF_ERROR(kernels::QuantizeFp8PerToken<T>(x_rows, in, m, in, x_fp8, scale_rows, stream_));
      x_scale = scale_rows;
    }
    const GemmTypes fp8_types =
        y_types == GemmTypes::kBf16ToBf16 ? GemmTypes::kFp8ToBf16 : GemmTypes::kFp8ToFp32;
    if (!io.add_to_output) {
      Fp8LinearOptions options;
      options.leave_unscaled = io.unscaled_fp8_output;
      return gemm_.Fp8Linear(x_fp8, x_scale, w.fp8_weight(), w.fp8_scale(), y_rows, m, out, in, fp8_types,
                             stream_, options);
    }
    if (fp8_types != GemmTypes::kFp8ToFp32)
      return absl::InternalError("FP8 accumulation needs an fp32 output");
    SCORED_ASSIGN_OR_RETURN(const bool scaled, gemm_.Fp8ScalesInEpilogue(out, in, fp8_types));
    float* proj_rows = proj_ + ch.begin * out;  // [m, out]
    SCORED_RETURN_IF_ERROR(gemm_.Fp8Linear(x_fp8, x_scale, w.fp8_weight(), w.fp8_scale(), proj_rows, m, out,
                                           in, fp8_types, stream_, Fp8LinearOptions::LeaveUnscaled()));
    return kernels::AddFp8Scaled(proj_rows, m, out, scaled ? nullptr : x_scale,
                                 scaled ? nullptr : w.fp8_scale(), static_cast<float*>(y_rows), stream_);
  }

  // W8A8 fusions (bf16 mode): a real FP8 GEMM whose input quantization needs only its own rank's columns
  // (column-parallel, or tp 1) takes its input straight from the fused RmsNorm + FP8 kernel, and down_proj
  // from the fused scales + SwiGLU + FP8 kernel. Results are bitwise those of the unfused kernels.
  // Not with an input rotation (it must run on the input first) or output rotations (they need the scaled
  // output).
  bool FedFp8(const DeviceLinear& w) const {
    return !kFp32 && w.fp8_resident() && !(tp_ != nullptr && w.act_amax_all_reduce()) &&
           w.input_rotations().empty() && w.output_rotations().empty();
  }
  // A norm's output: normed, or for an FP8-fed linear act_fp8 / fp8_scale_norm.
  NormOutput<T> NormInto(bool to_fp8) const {
    NormOutput<T> out;
    out.to_fp8 = to_fp8;
    out.normed = normed_;
    out.fp8 = act_fp8_;
    out.fp8_scale = fp8_scale_norm_;
    return out;
  }
  // tp 1: o_proj / down_proj sum over their input column halves (SumsInHalves).
  bool InHalves(const DeviceLinear& w) const {
    return tp_ == nullptr && acts_->row_parallel_halves && SumsInHalves(w, model_.dtype);
  }
  // A row-parallel sum to await: at tp 1 there is none.
  RowSum Summed(RowSum sum) const { return tp_ != nullptr ? sum : RowSum::kNone; }
  // Ends a stage of Activations::stage_times (profiling; nothing when unset).
  absl::Status Mark(const char* stage) {
    return acts_->stage_times != nullptr ? acts_->stage_times->Mark(stage, stream_) : absl::OkStatus();
  }
  int num_chunks() const { return static_cast<int>(chunks_.size()); }

  const ModelConfig& config_;
  const DeviceModel& model_;
  GemmRunner& gemm_;
  const ForwardBatch& batch_;
  Activations* const acts_;
  const cudaStream_t stream_;
  const TensorParallelContext* const tp_;
  const PassRole role_;
  const ReferenceModel* const reference_;  // kModel with a reference model loaded, else null

  const int64_t n_ = batch_.num_tokens;
  const int64_t hidden_ = config_.hidden_size;
  const int64_t num_heads_ = config_.num_heads, num_kv_heads_ = config_.num_kv_heads;
  const int64_t head_dim_ = config_.head_dim;
  const int64_t rotary_dim_ = config_.rotary_dim > 0 ? config_.rotary_dim : config_.head_dim;
  const int64_t q_dim_ = num_heads_ * head_dim_, kv_dim_ = num_kv_heads_ * head_dim_;
  const int64_t qkv_dim_ = q_dim_ + 2 * kv_dim_;
  const int64_t inter_ = config_.intermediate_size, vocab_ = config_.vocab_size;
  const float eps_ = static_cast<float>(config_.rms_norm_eps);
  const GemmTypes types_ = kFp32 ? GemmTypes::kFp32 : GemmTypes::kBf16ToBf16;
  // o_proj / down_proj outputs join the fp32 residual stream in the GEMM's epilogue (residual += x . W^T,
  // fp32, never rounded to bf16). Tensor parallelism: rank 0 adds its partial product to the residual, the
  // other ranks write theirs over it, and the sum over ranks of the residual rows is the full result.
  const GemmTypes to_fp32_ = kFp32 ? GemmTypes::kFp32 : GemmTypes::kBf16ToFp32;
  const bool add_to_residual_ = tp_ == nullptr || tp_->comm->rank() == 0;
  // The fused norm + FP8 and SwiGLU + FP8 kernels: not in the Gemma block (its norms add a pending delta;
  // GeGLU).
  const bool norm_fp8_ok_ = kernels::RmsNormQuantFp8Supports(hidden_) && !config_.sandwich_norms;
  const bool swiglu_fp8_ok_ = inter_ % 8 == 0 && inter_ <= kernels::kSwiGluQuantFp8MaxInter &&
                              config_.mlp_activation == MlpActivation::kSilu;

  // The activations (acts_'s buffers), rows in packed order.
  float* const residual_ = acts_->residual.as<float>();  // [n, hidden]
  T* const normed_ = acts_->normed.as<T>();              // [n, hidden]
  T* const qkv_ = acts_->qkv.as<T>();                    // [n, qkv_dim]: q | k | v of each token
  T* const q_ = qkv_;                                    //   [n, num_heads, head_dim], row stride qkv_dim
  T* const k_ = qkv_ + q_dim_;                           //   [n, num_kv_heads, head_dim], row stride qkv_dim
  T* const v_ = qkv_ + q_dim_ + kv_dim_;                 //   [n, num_kv_heads, head_dim], row stride qkv_dim
  T* const attn_ = acts_->attn.as<T>();                  // [n, q_dim]
  float* const proj_ = acts_->proj.as<float>();          // [n, hidden]: a W8A8 o / down GEMM's own output
  T* const gate_up_ = acts_->gate_up.as<T>();            // [n, 2 inter]: gate | up of each token
  T* const mlp_ = acts_->mlp.as<T>();                    // [n, inter]
  float* const logits_ = acts_->logits.as<float>();      // [logits_rows, vocab] (tp: the rank's shard)
  const int32_t* const tokens_ = acts_->tokens.as<int32_t>();          // [n]
  const int32_t* const positions_ = acts_->positions.as<int32_t>();    // [n]
  const int32_t* const cu_seqlens_ = acts_->cu_seqlens.as<int32_t>();  // [num_seqs + 1]
  const int32_t* const targets_ = acts_->targets.as<int32_t>();        // [n]
  // [max_tokens, rotary_dim / 2, 2] each: the pass's model's RoPE tables (activations.h)
  const bool ref_pass_ = role_ == PassRole::kReference;
  const float* const rope_table_ = (ref_pass_ ? acts_->ref_rope_table : acts_->rope_table).as<float>();
  const float* const rope_long_ =
      (ref_pass_ ? acts_->ref_rope_table_long : acts_->rope_table_long).as<float>();
  const float* const rope_local_ =
      (ref_pass_ ? acts_->ref_rope_table_local : acts_->rope_table_local).as<float>();
  float* const act_amax_ = acts_->act_amax.as<float>();         // [n, 2] (tp only)
  uint8_t* const act_fp8_ = acts_->act_fp8.as<uint8_t>();       // [n, in] W8A8: a real FP8 GEMM's input
  float* const fp8_scale_norm_ = acts_->act_scale.as<float>();  // [n]: its per-token scales (qkv, o, gate_up)
  float* const fp8_scale_mlp_ = fp8_scale_norm_ + acts_->max_tokens;  // [n]: those of down_proj's input

  const std::vector<RowChunk> chunks_;
  WeightStream weights_;
  RowReducer sums_;
  bool proj_pending_ = false;  // the Gemma block: proj holds a block's normed output not yet in the residual
};

// The reference model's pass when the batch asks for the comparison, then the model's.
template <typename T>
absl::Status RunPasses(const ModelConfig& config, const DeviceModel& model, GemmRunner& gemm,
                       const ForwardBatch& batch, Activations* acts, cudaStream_t stream,
                       const TensorParallelContext* tp, const ReferenceModel* reference) {
  if (acts->stage_times != nullptr) SCORED_RETURN_IF_ERROR(acts->stage_times->Begin(stream));
  if (reference != nullptr && batch.options.want_reference) {
    SCORED_RETURN_IF_ERROR(ForwardPass<T>(*reference->config, *reference->model, gemm, batch, acts, stream,
                                          tp, PassRole::kReference, nullptr)
                               .Run());
  }
  return ForwardPass<T>(config, model, gemm, batch, acts, stream, tp, PassRole::kModel, reference).Run();
}

}  // namespace

bool SumsInHalves(const DeviceLinear& linear, ComputeDtype dtype) {
  const int64_t in = linear.in_features();
  return !linear.fp8_resident() && !linear.w8a8_dynamic_fp8() && !linear.w8a8_dynamic_int8() && in % 2 == 0 &&
         (in / 2 * ActBytes(dtype)) % 16 == 0;
}

absl::Status Forward(const ModelConfig& config, const DeviceModel& model, GemmRunner& gemm,
                     const ForwardBatch& batch, Activations* acts, cudaStream_t stream,
                     const TensorParallelContext* tp, const ReferenceModel* reference) {
  if (batch.num_tokens <= 0 || batch.num_tokens > acts->max_tokens) {
    return absl::OutOfRangeError(
        absl::StrCat("batch of ", batch.num_tokens, " tokens; the engine holds ", acts->max_tokens));
  }
  const absl::Status status = model.dtype == ComputeDtype::kBf16
                                  ? RunPasses<bf16_t>(config, model, gemm, batch, acts, stream, tp, reference)
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

// The CPU reference Engine: every linear decoded once to fp32 (LinearWeight::DequantizeRows, exact), then a
// plain fp32 forward with fp64 reductions built from the ops of ops.h. Each sequence of a batch is run on
// its own, so a result never depends on the rest of the batch; the thread pool only splits rows/heads
// inside one op, which does not change any value (see ops.h).
#include "engine/reference/reference_engine.h"

#ifdef __linux__
#include <sched.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/dtype.h"
#include "engine/base/status_macros.h"
#include "engine/model/config.h"
#include "engine/model/fingerprint.h"
#include "engine/model/layer_plan.h"
#include "engine/model/raw_read.h"
#include "engine/model/rope_freq.h"
#include "engine/model/weights.h"
#include "engine/reference/ops.h"
#include "engine/reference/thread_pool.h"
#include "engine/score_contract.h"

namespace scored {
namespace {

using ref::ThreadPool;

// lm_head rows are computed for this many positions at a time, so full-vocabulary fp32 logits are never
// held for a whole sequence (128k vocab x 8k positions would be 4 GiB).
constexpr int64_t kLogitChunk = 64;

// One linear layer decoded to fp32.
struct DenseLinear {
  int64_t in_features = 0;
  int64_t out_features = 0;
  std::vector<float> w;              // [out_features, in_features]
  std::vector<float> bias;           // [out_features]; empty when the layer has none
  bool fake_quantize_input = false;  // W8A8 dynamic FP8: quantize each input row first
  int64_t act_group_size = 0;        // fake_quantize_input: 0 one scale per row, else per column group
  bool int8_input = false;           // W8A8 dynamic INT8: quantize each input row to int8 first
  bool int8_input_symmetric = true;  // int8_input: false = a zero point per row
  // Static per-tensor activation quantization with the stored input_scale (and input_zero_point).
  bool static_fp8_input = false;
  bool static_int8_input = false;
  ref::Int8TokenParams static_params;  // static_*_input: {input_scale, input_zero_point or 0}
  // transform_config's online rotations (LinearWeight::transforms), the matrices widened to double.
  struct Transform {
    bool output = false;
    bool inverse = false;
    int64_t size = 0;
    std::vector<double> matrix;  // [size, size]
  };
  std::vector<Transform> transforms;
};

// One GLU MLP (an expert, the shared expert): down(act(gate(x)) * up(x)), the act of its ChannelMixerPlan.
struct DenseSwiGlu {
  DenseLinear gate, up, down;
};

// A sparse layer's mixture-of-experts block (LayerWeights::moe).
struct DenseMoe {
  DenseLinear router;                   // [num_experts, hidden_size]
  std::vector<float> correction_bias;   // [num_experts] (ExpertsPlan::correction_bias), else empty
  std::vector<float> router_scale;      // [hidden_size] (ExpertsPlan::router_input_norm), else empty
  std::vector<float> per_expert_scale;  // [num_experts] (ExpertsPlan::per_expert_scale), else empty
  std::vector<DenseSwiGlu> experts;     // [num_experts]
  bool shared = false;                  // a shared expert: Qwen2-MoE's gated one, DeepSeek-V3's ungated ones
  DenseSwiGlu shared_expert;
  DenseLinear shared_gate;  // [1, hidden_size]; gated shared experts only
};

struct DenseLayer {
  std::vector<float> input_norm;           // [hidden_size]
  std::vector<float> post_attention_norm;  // [hidden_size]
  std::vector<float> q_norm, k_norm;       // [head_dim]; empty unless the model has qk_norm
  std::vector<float> sinks;                // [num_heads]: AttentionPlan::sinks (gpt-oss), else empty
  float layer_scalar = 0.0f;               // LayerPlan::layer_scalar (Gemma 4): the output's factor
  // sandwich_norms (Gemma) only, [hidden_size]: around the MLP (post_attention_norm then normalizes the
  // attention output). Gemma's norms are stored here as fp32(1 + weight) (OffsetNormWeight).
  std::vector<float> pre_ff_norm, post_ff_norm;
  DenseLinear q, k, v, o;  // attention layers (q: [q_h | gate_h] per head under AttentionPlan::output_gate)
  // Gated DeltaNet layers (LayerPlan::delta_net_mixer) instead of q / k / v / o.
  struct DeltaNet {
    bool fused = false;  // Qwen3-Next: in_proj_qkvz / in_proj_ba, rows grouped per k head
    DenseLinear in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, in_proj_qkvz, in_proj_ba, out_proj;
    std::vector<float> conv1d;   // [conv_dim, kernel]
    std::vector<float> neg_a;    // -exp(A_log) in fp32 [num_v_heads]
    std::vector<float> dt_bias;  // [num_v_heads]
    std::vector<float> norm;     // [v_head_dim]
  } delta_net;
  // Multi-head latent attention layers (LayerPlan::latent_attention_mixer): these, with q (without
  // q_lora_rank) and o above.
  struct Latent {
    DenseLinear q_a, q_b;          // q_lora_rank > 0
    std::vector<float> q_a_norm;   // [q_lora_rank]
    DenseLinear kv_a, kv_b;        // kv_a_proj_with_mqa, kv_b_proj
    std::vector<float> kv_a_norm;  // [kv_lora_rank]
  } latent;
  DenseLinear gate, up, down;  // dense layers
  DenseMoe moe;                // LayerPlan::experts(): instead of gate/up/down (or beside them: dense_glu())
  // ChannelMixerKind::kDenseAndExperts (Gemma 4) only, [hidden_size]: the parallel block's norms.
  std::vector<float> experts_pre_norm, dense_post_norm, experts_post_norm;
  // FP8 KV cache (kv_cache_scheme, applied): K after RoPE and V quantize-dequantized with these; 0 = off.
  float k_scale = 0.0f, v_scale = 0.0f;
};

absl::StatusOr<std::vector<float>> ToFloat(const TensorView& t, int64_t expected_elements) {
  if (t.NumElements() != expected_elements) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, " in ", t.file, " has ",
                                                   t.NumElements(), " elements, expected ",
                                                   expected_elements));
  }
  std::vector<float> out(expected_elements);
  SCORED_RETURN_IF_ERROR(TensorToFloat(t, out.data(), expected_elements));
  return out;
}

// Decodes a linear layer, splitting its rows over the pool. `bias`: whether the model has a bias on this
// linear (AttentionPlan::qkv_bias for q/k/v, o_bias for o_proj; none elsewhere), which the loader took iff
// so.
//
// round_to_scale_dtype: a quantized weight whose scales are BF16 / F16 is rounded (RNE) to that dtype after
// decoding, i.e. compressed-tensors' decompression in the scale dtype. That is what transformers 5.17 hands
// the fused experts of a quantized MoE checkpoint (it decompresses each stored expert before widening it
// to the model's dtype), unlike ordinary Linears, whose scales it widens first (exact fp32 products).
absl::StatusOr<DenseLinear> Decode(const LinearWeight& lw, bool bias, ThreadPool* pool,
                                   bool round_to_scale_dtype = false) {
  DenseLinear d;
  d.in_features = lw.in_features;
  d.out_features = lw.out_features;
  d.fake_quantize_input = lw.w8a8_dynamic_fp8;
  d.act_group_size = lw.act_group_size;
  d.int8_input = lw.w8a8_dynamic_int8;
  d.int8_input_symmetric = lw.act_symmetric;
  d.static_fp8_input = lw.static_input_fp8;
  d.static_int8_input = lw.static_input_int8;
  if (d.static_fp8_input || d.static_int8_input) {
    SCORED_RETURN_IF_ERROR(TensorToFloat(lw.input_scale, &d.static_params.scale, 1));
    if (lw.input_zero_point.present()) {
      d.static_params.zero_point = static_cast<float>(static_cast<int8_t>(lw.input_zero_point.data[0]));
    }
  }
  for (const LinearTransform& t : lw.transforms) {
    DenseLinear::Transform dt{t.output, t.inverse, t.matrix.shape[0], {}};
    dt.matrix.resize(static_cast<size_t>(dt.size * dt.size));
    for (int64_t i = 0; i < dt.size * dt.size; ++i) {
      dt.matrix[i] = t.matrix.dtype == DType::kF64
                         ? raw_read::Load<double>(t.matrix.data, i)
                         : static_cast<double>(raw_read::Load<float>(t.matrix.data, i));
    }
    d.transforms.push_back(std::move(dt));
  }
  d.w.resize(lw.out_features * lw.in_features);
  std::mutex mu;
  absl::Status status;
  pool->ParallelFor(lw.out_features, [&](int64_t row_begin, int64_t row_end) {
    absl::Status s = lw.DequantizeRows(row_begin, row_end, d.w.data() + row_begin * lw.in_features);
    std::lock_guard<std::mutex> lock(mu);
    status.Update(s);
  });
  SCORED_RETURN_IF_ERROR(status);
  if (round_to_scale_dtype && lw.format != WeightFormat::kDense) {
    const DType sd = lw.weight_scale.dtype;
    if (sd == DType::kBF16) {
      for (float& v : d.w) v = RoundToBf16(v);
    } else if (sd == DType::kF16) {
      for (float& v : d.w) v = RoundToFp16(v);
    }
  }
  if (bias != lw.bias.present()) {
    return absl::InvalidArgumentError(
        absl::StrCat(lw.module, bias ? ": the model has a bias here, the weights none"
                                     : ": a bias the model does not have"));
  }
  if (bias) {
    SCORED_ASSIGN_OR_RETURN(d.bias, ToFloat(lw.bias, lw.out_features));
  }
  return d;
}

// A multi-head latent attention layer's linears and norms (LatentAttentionPlan says which it has).
absl::Status DecodeLatentAttention(const LatentAttentionPlan& plan, const LayerWeights& lw, ThreadPool* pool,
                                   DenseLayer* out) {
  const LatentAttentionWeights& w = lw.latent;
  DenseLayer::Latent& d = out->latent;
  if (plan.q_lora_rank > 0) {
    SCORED_ASSIGN_OR_RETURN(d.q_a, Decode(w.q_a_proj, plan.a_bias, pool));
    SCORED_ASSIGN_OR_RETURN(d.q_a_norm, ToFloat(w.q_a_layernorm, plan.q_lora_rank));
    SCORED_ASSIGN_OR_RETURN(d.q_b, Decode(w.q_b_proj, /*bias=*/false, pool));
  } else {
    SCORED_ASSIGN_OR_RETURN(out->q, Decode(lw.q_proj, /*bias=*/false, pool));
  }
  SCORED_ASSIGN_OR_RETURN(d.kv_a, Decode(w.kv_a_proj, plan.a_bias, pool));
  SCORED_ASSIGN_OR_RETURN(d.kv_a_norm, ToFloat(w.kv_a_layernorm, plan.kv_lora_rank));
  SCORED_ASSIGN_OR_RETURN(d.kv_b, Decode(w.kv_b_proj, /*bias=*/false, pool));
  SCORED_ASSIGN_OR_RETURN(out->o, Decode(lw.o_proj, plan.o_bias, pool));
  return absl::OkStatus();
}

// A sparse layer's block: the router and the shared-expert gate exactly as stored, the experts in their
// scale dtype (Decode's round_to_scale_dtype: transformers' reading of quantized experts).
absl::Status DecodeMoe(const ExpertsPlan& plan, const MoeWeights& mw, ThreadPool* pool, DenseMoe* out) {
  SCORED_ASSIGN_OR_RETURN(out->router, Decode(mw.router, plan.router_bias, pool));
  if (static_cast<int64_t>(mw.experts.size()) != plan.num_experts) {
    return absl::InvalidArgumentError(
        absl::StrCat("a sparse layer has ", mw.experts.size(), " experts, the config ", plan.num_experts));
  }
  out->experts.resize(mw.experts.size());
  for (size_t e = 0; e < mw.experts.size(); ++e) {
    const ExpertWeights& x = mw.experts[e];
    DenseSwiGlu& d = out->experts[e];
    const bool b = plan.expert_bias;
    SCORED_ASSIGN_OR_RETURN(d.gate, Decode(x.gate_proj, b, pool, /*round_to_scale_dtype=*/true));
    SCORED_ASSIGN_OR_RETURN(d.up, Decode(x.up_proj, b, pool, /*round_to_scale_dtype=*/true));
    SCORED_ASSIGN_OR_RETURN(d.down, Decode(x.down_proj, b, pool, /*round_to_scale_dtype=*/true));
  }
  out->shared = plan.shared_expert();
  if (out->shared) {  // an ordinary MLP in transformers (DeepseekV3MLP, Qwen2MoeMLP): not rounded
    const ExpertWeights& x = mw.shared_expert;
    DenseSwiGlu& d = out->shared_expert;
    SCORED_ASSIGN_OR_RETURN(d.gate, Decode(x.gate_proj, /*bias=*/false, pool));
    SCORED_ASSIGN_OR_RETURN(d.up, Decode(x.up_proj, /*bias=*/false, pool));
    SCORED_ASSIGN_OR_RETURN(d.down, Decode(x.down_proj, /*bias=*/false, pool));
    if (plan.shared_expert_gated) {
      SCORED_ASSIGN_OR_RETURN(out->shared_gate, Decode(mw.shared_expert_gate, /*bias=*/false, pool));
    }
  }
  if (plan.correction_bias) {
    SCORED_ASSIGN_OR_RETURN(out->correction_bias, ToFloat(mw.correction_bias, plan.num_experts));
  }
  if (plan.router_input_norm) {
    SCORED_ASSIGN_OR_RETURN(out->router_scale, ToFloat(mw.router_scale, mw.router.in_features));
  }
  if (plan.per_expert_scale) {
    SCORED_ASSIGN_OR_RETURN(out->per_expert_scale, ToFloat(mw.per_expert_scale, plan.num_experts));
  }
  return absl::OkStatus();
}

// CPUs this process may run on (its affinity mask: taskset, cgroup cpusets), else the hardware count.
// More threads than that only contend.
int UsableCpus() {
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

class ReferenceEngine : public Engine {
 public:
  ReferenceEngine(ModelConfig config, ModelPlan plan, int num_threads)
      : config_(std::move(config)), plan_(std::move(plan)), pool_(num_threads) {}

  absl::Status Load(const ModelWeights& weights, const EngineOptions& options);

  std::vector<absl::StatusOr<ScoreResult>> Score(absl::Span<const ScoreRequest> batch) override;
  const ModelInfo& info() const override { return info_; }

  // Holds `reference` (R) for want_reference; its vocabulary size must be this model's (INVALID_ARGUMENT
  // naming both otherwise). The longest sequence becomes the smaller of the two models' limits.
  absl::Status SetBaseline(std::unique_ptr<ReferenceEngine> reference);
  int64_t vocab_size() const { return config_.vocab_size; }

 private:
  // Decodes layer l (its plan says which tensors it has) into *out and checks every linear's shape against
  // the config; returns the floats it holds. kv_fp8: apply the checkpoint's FP8 KV cache.
  absl::StatusOr<int64_t> DecodeLayer(int64_t l, const LayerWeights& lw, bool kv_fp8, DenseLayer* out) const;
  struct Scratch;
  // The final-norm hidden state of every position of one sequence: one readable loop over the layer plan.
  void Forward(const std::vector<int32_t>& tokens,
               std::vector<float>* hidden) const;  // [n, hidden_size]
  // s->delta = o_proj(attention(q, k, v)) of s->normed (n positions), as the layer's attention plan says.
  void AttentionBlock(const AttentionPlan& plan, const DenseLayer& layer, int64_t n, Scratch* s) const;
  // s->delta = out_proj(gated_norm(delta_rule(conv(in_proj_qkv(s->normed))), in_proj_z(s->normed))): the
  // Gated DeltaNet of family.h's LinearAttentionTraits.
  void DeltaNetBlock(const DeltaNetPlan& plan, const DenseLayer& layer, int64_t n, Scratch* s) const;
  // s->delta = o_proj(latent attention of s->normed): DeepSeek-V3's multi-head latent attention, the naive
  // form (family.h LatentAttentionTraits), through ref::LatentAttention.
  void LatentAttentionBlock(const LatentAttentionPlan& plan, const DenseLayer& layer, int64_t n,
                            Scratch* s) const;
  // Qwen3-Next's in_proj_qkvz / in_proj_ba of s->normed, reordered from their per-k-head groups
  // (fix_query_key_value_ordering) into mixed [n, q | k | v], z [n, value_dim], b and a [n, num_v_heads].
  void FusedDeltaNetProjections(const DeltaNetPlan& plan, const DenseLayer::DeltaNet& d, int64_t n,
                                const Scratch* s, float* mixed, float* z, float* b, float* a) const;
  // s->delta = down(act(gate(s->normed)) * up(s->normed)), act per the plan (SwiGLU / GeGLU).
  void GluMlp(const ChannelMixerPlan& plan, const DenseLayer& layer, int64_t n, Scratch* s) const;
  ScoreResult ScoreSequence(const ScoreRequest& request) const;
  // The lm_head logits of `rows` positions, from the final-norm hidden states of the positions before them.
  void Logits(const float* hidden,  // [rows, hidden_size]
              int64_t rows,
              float* logits) const;  // [rows, vocab_size]
  // Fills result's want_reference fields for the positions [first, n) of `tokens`, Q's hidden states given.
  void CompareWithBaseline(const std::vector<int32_t>& tokens, int64_t first,
                           const std::vector<float>& hidden,  // [n, hidden_size], this model's
                           ScoreResult* result) const;
  // y = linear(x), with the W8A8 input quantization when the layer has it.
  void ApplyLinear(const DenseLinear& linear, const float* x,  // [n, in_features]
                   int64_t n,
                   float* y) const;  // [n, out_features]
  // ApplyLinear without the transforms: input quantization (if any), then the product and bias.
  void ApplyProduct(const DenseLinear& linear, const float* x, int64_t n, float* y) const;
  // y = the mixture-of-experts block on x (config.h's semantics): router, MoeRoute, each expert on the
  // tokens routed to it (row by row, so a token's values do not depend on the others), MoeCombine.
  // s->delta = post_ff_1(glu(s->normed)) + post_ff_2(experts(pre_ff_2(residual))), the router reading the
  // residual (Gemma 4's ChannelMixerKind::kDenseAndExperts; s->normed holds pre_ff_norm(residual)).
  void ParallelGluAndExperts(const ChannelMixerPlan& plan, const DenseLayer& layer, const float* residual,
                             int64_t n, Scratch* s) const;
  // y = the experts' weighted sum on x, routed from router_x's logits (x itself but for Gemma 4).
  void MoeBlock(const ChannelMixerPlan& plan, const DenseMoe& moe, const float* x,
                const float* router_x,  // [n, hidden_size]
                int64_t n,
                float* y) const;  // [n, hidden_size]
  // y = down(silu(gate(x)) * up(x)).
  void ExpertMlp(MlpActivation act, const DenseSwiGlu& mlp, const float* x, int64_t n, float* y) const;
  // out[t, :] = RmsNorm(x[t, :]) for rows of `width` elements, rows split over the pool; eps > 0 instead of
  // rms_norm_eps (the latent attention's own norms).
  void NormRows(const float* x, const std::vector<float>& weight, int64_t rows, int64_t width, float* out,
                double eps = 0.0) const;

  const ModelConfig config_;  // the numbers (sizes, eps, RoPE parameters)
  const ModelPlan plan_;      // the structure: every branch of Load and Forward reads it
  mutable ThreadPool pool_;
  ModelInfo info_;
  std::vector<float> embed_;           // [vocab_size, hidden_size]
  std::vector<float> final_norm_;      // [hidden_size]
  std::vector<float> inv_freq_;        // [rotary_dim / 2]
  std::vector<float> inv_freq_long_;   // longrope: for sequences beyond original_max_position_embeddings
  float rope_scaling_ = 1.0f;          // RopeAttentionScaling
  std::vector<float> inv_freq_local_;  // RopeTable::kLocal layers (Gemma 3's sliding layers)
  std::vector<float> unit_norm_;       // ones [max(hidden_size, head dims)]: the weightless norms' weight
  std::vector<DenseLayer> layers_;
  DenseLinear lm_head_;                         // [vocab_size, hidden_size]
  std::unique_ptr<ReferenceEngine> reference_;  // R; null without --reference_model
};

absl::Status ReferenceEngine::SetBaseline(std::unique_ptr<ReferenceEngine> reference) {
  SCORED_RETURN_IF_ERROR(CheckBaselineVocabulary(config_.vocab_size, reference->config_.vocab_size));
  info_.max_seq_len = std::min(info_.max_seq_len, reference->info_.max_seq_len);
  info_.reference = std::make_shared<const ModelInfo>(reference->info_);
  reference_ = std::move(reference);
  return absl::OkStatus();
}

absl::Status ReferenceEngine::Load(const ModelWeights& weights, const EngineOptions& options) {
  const ModelConfig& c = config_;
  if (c.num_heads <= 0 || c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0 || c.head_dim <= 0 ||
      c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported attention shape: num_attention_heads ",
                                                   c.num_heads, ", num_key_value_heads ", c.num_kv_heads,
                                                   ", head_dim ", c.head_dim));
  }
  SCORED_ASSIGN_OR_RETURN(embed_, ToFloat(weights.embed_tokens(), c.vocab_size * c.hidden_size));
  SCORED_ASSIGN_OR_RETURN(final_norm_, ToFloat(weights.final_norm(), c.hidden_size));
  if (plan_.offset_norms) ref::OffsetNormWeight(final_norm_.data(), static_cast<int64_t>(final_norm_.size()));
  inv_freq_ = RopeInvFreq(RopeTableConfig(c, RopeTable::kGlobal));
  if (plan_.local_rope) inv_freq_local_ = RopeInvFreq(RopeTableConfig(c, RopeTable::kLocal));
  inv_freq_long_ = RopeInvFreqForLength(c, std::numeric_limits<int64_t>::max());
  rope_scaling_ = RopeAttentionScaling(c);
  // The weightless norms' unit weight: v's per head, Gemma 4's router input over the hidden size.
  int64_t unit_width = c.hidden_size;
  for (const LayerPlan& p : plan_.layers) unit_width = std::max(unit_width, p.attention.head_dim);
  unit_norm_.assign(static_cast<size_t>(unit_width), 1.0f);
  if (weights.layers().size() != plan_.layers.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the checkpoint has ", weights.layers().size(),
                                                   " layers, config.json says ", c.num_layers));
  }
  int64_t resident_floats = static_cast<int64_t>(embed_.size() + final_norm_.size());
  layers_.resize(plan_.layers.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const bool kv_fp8 = weights.kv_cache_fp8() && options.kv_cache_quant;
    SCORED_ASSIGN_OR_RETURN(const int64_t floats,
                            DecodeLayer(static_cast<int64_t>(l), weights.layers()[l], kv_fp8, &layers_[l]));
    resident_floats += floats;
  }
  // Tied (config.tie_word_embeddings): weights.lm_head() is a dense view of the embedding.
  SCORED_ASSIGN_OR_RETURN(lm_head_, Decode(weights.lm_head(), /*bias=*/false, &pool_));
  if (lm_head_.out_features != c.vocab_size || lm_head_.in_features != c.hidden_size) {
    return absl::InvalidArgumentError(absl::StrCat("lm_head is [", lm_head_.out_features, ", ",
                                                   lm_head_.in_features, "], expected [", c.vocab_size, ", ",
                                                   c.hidden_size, "]"));
  }
  resident_floats += static_cast<int64_t>(lm_head_.w.size() + lm_head_.bias.size());

  const ModelSummary& summary = weights.summary();
  info_.architecture = c.architecture;
  info_.format = weights.EngineFormat(options.kv_cache_quant);
  info_.format_notes = summary.notes;
  info_.backend = "cpu";
  info_.compute_dtype = "fp32";
  info_.tp = 1;
  info_.vocab_size = c.vocab_size;
  SCORED_ASSIGN_OR_RETURN(info_.max_seq_len,
                          ServedContextLength(c, options.max_seq_len, options.allow_long_context));
  // No sliding-window attention here: full causal attention equals it only up to the window.
  if (plan_.max_context > 0) info_.max_seq_len = std::min(info_.max_seq_len, plan_.max_context);
  info_.max_batch_tokens = options.max_batch_tokens;
  info_.num_parameters = summary.num_parameters;
  info_.bits_per_weight_decoder = summary.bits_per_weight_decoder;
  info_.bits_per_weight_head = summary.bits_per_weight_head;
  info_.resident_bytes = resident_floats * static_cast<int64_t>(sizeof(float));
  SCORED_ASSIGN_OR_RETURN(info_.model_fingerprint, ModelFingerprint(options.model_dir));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ReferenceEngine::DecodeLayer(int64_t l, const LayerWeights& lw, bool kv_fp8,
                                                     DenseLayer* out) const {
  const ModelConfig& c = config_;
  const LayerPlan& plan = plan_.layers[static_cast<size_t>(l)];
  ThreadPool* pool = &pool_;
  DenseLayer& layer = *out;
  SCORED_ASSIGN_OR_RETURN(layer.input_norm, ToFloat(lw.input_layernorm, c.hidden_size));
  SCORED_ASSIGN_OR_RETURN(layer.post_attention_norm, ToFloat(lw.post_attention_layernorm, c.hidden_size));
  const int64_t hd = plan.attention.head_dim, kv_width = plan.attention.num_kv_heads * hd;
  if (plan.attention.qk_norm) {
    SCORED_ASSIGN_OR_RETURN(layer.q_norm, ToFloat(lw.q_norm, hd));
    SCORED_ASSIGN_OR_RETURN(layer.k_norm, ToFloat(lw.k_norm, hd));
  } else if (plan.attention.qk_norm_whole) {  // MiniMax-M2: over the whole q and k projections
    SCORED_ASSIGN_OR_RETURN(layer.q_norm, ToFloat(lw.q_norm, c.num_heads * c.head_dim));
    SCORED_ASSIGN_OR_RETURN(layer.k_norm, ToFloat(lw.k_norm, c.num_kv_heads * c.head_dim));
  }
  if (plan.sandwich()) {
    SCORED_ASSIGN_OR_RETURN(layer.pre_ff_norm, ToFloat(lw.pre_feedforward_layernorm, c.hidden_size));
    SCORED_ASSIGN_OR_RETURN(layer.post_ff_norm, ToFloat(lw.post_feedforward_layernorm, c.hidden_size));
  }
  if (plan_.offset_norms) {
    for (std::vector<float>* w : {&layer.input_norm, &layer.post_attention_norm, &layer.q_norm, &layer.k_norm,
                                  &layer.pre_ff_norm, &layer.post_ff_norm}) {
      ref::OffsetNormWeight(w->data(), static_cast<int64_t>(w->size()));
    }
  }
  struct Shape {
    const DenseLinear* d;
    int64_t out, in;
  };
  std::vector<Shape> shapes;
  if (plan.delta_net_mixer()) {
    const DeltaNetPlan& dn = plan.delta_net;
    DenseLayer::DeltaNet& d = layer.delta_net;
    d.fused = lw.delta_net.fused;
    if (d.fused) {
      SCORED_ASSIGN_OR_RETURN(d.in_proj_qkvz, Decode(lw.delta_net.in_proj_qkvz, false, pool));
      SCORED_ASSIGN_OR_RETURN(d.in_proj_ba, Decode(lw.delta_net.in_proj_ba, false, pool));
      shapes = {{&d.in_proj_qkvz, dn.conv_dim() + dn.value_dim(), c.hidden_size},
                {&d.in_proj_ba, 2 * dn.num_v_heads, c.hidden_size}};
    } else {
      SCORED_ASSIGN_OR_RETURN(d.in_proj_qkv, Decode(lw.delta_net.in_proj_qkv, false, pool));
      SCORED_ASSIGN_OR_RETURN(d.in_proj_z, Decode(lw.delta_net.in_proj_z, false, pool));
      SCORED_ASSIGN_OR_RETURN(d.in_proj_b, Decode(lw.delta_net.in_proj_b, false, pool));
      SCORED_ASSIGN_OR_RETURN(d.in_proj_a, Decode(lw.delta_net.in_proj_a, false, pool));
      shapes = {{&d.in_proj_qkv, dn.conv_dim(), c.hidden_size},
                {&d.in_proj_z, dn.value_dim(), c.hidden_size},
                {&d.in_proj_b, dn.num_v_heads, c.hidden_size},
                {&d.in_proj_a, dn.num_v_heads, c.hidden_size}};
    }
    SCORED_ASSIGN_OR_RETURN(d.out_proj, Decode(lw.delta_net.out_proj, false, pool));
    shapes.push_back({&d.out_proj, c.hidden_size, dn.value_dim()});
    SCORED_ASSIGN_OR_RETURN(d.conv1d, ToFloat(lw.delta_net.conv1d, dn.conv_dim() * dn.conv_kernel));
    SCORED_ASSIGN_OR_RETURN(d.neg_a, ToFloat(lw.delta_net.a_log, dn.num_v_heads));
    for (float& a : d.neg_a) a = -std::exp(a);  // transformers: -A_log.float().exp(), in fp32
    SCORED_ASSIGN_OR_RETURN(d.dt_bias, ToFloat(lw.delta_net.dt_bias, dn.num_v_heads));
    SCORED_ASSIGN_OR_RETURN(d.norm, ToFloat(lw.delta_net.norm, dn.v_head_dim));
  } else if (plan.latent_attention_mixer()) {
    const LatentAttentionPlan& a = plan.latent;
    SCORED_RETURN_IF_ERROR(DecodeLatentAttention(a, lw, pool, &layer));
    const DenseLayer::Latent& m = layer.latent;
    shapes = a.q_lora_rank > 0 ? std::vector<Shape>{{&m.q_a, a.q_lora_rank, c.hidden_size},
                                                    {&m.q_b, a.q_width(), a.q_lora_rank}}
                               : std::vector<Shape>{{&layer.q, a.q_width(), c.hidden_size}};
    shapes.push_back({&m.kv_a, a.kv_a_width(), c.hidden_size});
    shapes.push_back({&m.kv_b, a.kv_b_width(), a.kv_lora_rank});
    shapes.push_back({&layer.o, c.hidden_size, a.o_width()});
  } else {
    const bool bias = plan.attention.qkv_bias;
    SCORED_ASSIGN_OR_RETURN(layer.q, Decode(lw.q_proj, bias, pool));
    SCORED_ASSIGN_OR_RETURN(layer.k, Decode(lw.k_proj, bias, pool));
    if (!plan.attention.k_eq_v) {
      SCORED_ASSIGN_OR_RETURN(layer.v, Decode(lw.v_proj, bias, pool));
    }
    SCORED_ASSIGN_OR_RETURN(layer.o, Decode(lw.o_proj, plan.attention.o_bias, pool));
    if (plan.attention.sinks) {
      SCORED_ASSIGN_OR_RETURN(layer.sinks, ToFloat(lw.sinks, c.num_heads));
    }
    const int64_t q_rows = c.num_heads * hd * (plan.attention.output_gate ? 2 : 1);
    shapes = {{&layer.q, q_rows, c.hidden_size},
              {&layer.k, kv_width, c.hidden_size},
              {&layer.o, c.hidden_size, c.num_heads * hd}};
    if (!plan.attention.k_eq_v) shapes.push_back({&layer.v, kv_width, c.hidden_size});
  }
  if (plan.experts()) {
    SCORED_RETURN_IF_ERROR(DecodeMoe(plan.channel_mixer.experts, lw.moe, pool, &layer.moe));
  }
  if (plan.dense_glu()) {
    SCORED_ASSIGN_OR_RETURN(layer.gate, Decode(lw.gate_proj, /*bias=*/false, pool));
    SCORED_ASSIGN_OR_RETURN(layer.up, Decode(lw.up_proj, /*bias=*/false, pool));
    SCORED_ASSIGN_OR_RETURN(layer.down, Decode(lw.down_proj, /*bias=*/false, pool));
  }
  if (plan.experts() && plan.dense_glu()) {  // Gemma 4's parallel block
    SCORED_ASSIGN_OR_RETURN(layer.experts_pre_norm, ToFloat(lw.experts_pre_norm, c.hidden_size));
    SCORED_ASSIGN_OR_RETURN(layer.dense_post_norm, ToFloat(lw.dense_post_norm, c.hidden_size));
    SCORED_ASSIGN_OR_RETURN(layer.experts_post_norm, ToFloat(lw.experts_post_norm, c.hidden_size));
  }
  if (plan.layer_scalar) SCORED_RETURN_IF_ERROR(TensorToFloat(lw.layer_scalar, &layer.layer_scalar, 1));
  if (kv_fp8) {
    SCORED_RETURN_IF_ERROR(TensorToFloat(lw.k_scale, &layer.k_scale, 1));
    SCORED_RETURN_IF_ERROR(TensorToFloat(lw.v_scale, &layer.v_scale, 1));
  }
  auto swiglu = [&](const DenseSwiGlu& mlp, int64_t inter) {
    shapes.push_back({&mlp.gate, inter, c.hidden_size});
    shapes.push_back({&mlp.up, inter, c.hidden_size});
    shapes.push_back({&mlp.down, c.hidden_size, inter});
  };
  if (plan.experts()) {
    const ExpertsPlan& e = plan.channel_mixer.experts;
    shapes.push_back({&layer.moe.router, e.num_experts, c.hidden_size});
    for (const DenseSwiGlu& expert : layer.moe.experts) swiglu(expert, e.expert_intermediate_size);
    if (layer.moe.shared) swiglu(layer.moe.shared_expert, e.shared_expert_intermediate_size);
    if (layer.moe.shared && e.shared_expert_gated)
      shapes.push_back({&layer.moe.shared_gate, 1, c.hidden_size});
  }
  if (plan.dense_glu()) {
    shapes.push_back({&layer.gate, plan.channel_mixer.intermediate_size, c.hidden_size});
    shapes.push_back({&layer.up, plan.channel_mixer.intermediate_size, c.hidden_size});
    shapes.push_back({&layer.down, c.hidden_size, plan.channel_mixer.intermediate_size});
  }
  const DenseLayer::DeltaNet& dn = layer.delta_net;
  int64_t floats =
      static_cast<int64_t>(layer.input_norm.size() + layer.post_attention_norm.size() + layer.q_norm.size() +
                           layer.k_norm.size() + layer.pre_ff_norm.size() + layer.post_ff_norm.size() +
                           dn.conv1d.size() + dn.neg_a.size() + dn.dt_bias.size() + dn.norm.size() +
                           layer.latent.q_a_norm.size() + layer.latent.kv_a_norm.size() + layer.sinks.size());
  for (const Shape& s : shapes) {
    if (s.d->out_features != s.out || s.d->in_features != s.in) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", l, ": a linear weight is [", s.d->out_features,
                                                     ", ", s.d->in_features, "], the config implies [", s.out,
                                                     ", ", s.in, "]"));
    }
    floats += static_cast<int64_t>(s.d->w.size() + s.d->bias.size());
  }
  return floats;
}

std::vector<absl::StatusOr<ScoreResult>> ReferenceEngine::Score(absl::Span<const ScoreRequest> batch) {
  ScoreLimits limits;
  limits.max_seq_len = info_.max_seq_len;
  limits.max_batch_tokens = info_.max_batch_tokens;
  limits.vocab_size = config_.vocab_size;
  limits.has_reference = reference_ != nullptr;
  std::vector<absl::StatusOr<ScoreResult>> results;
  results.reserve(batch.size());
  for (const ScoreRequest& request : batch) {
    const absl::Status valid = ValidateScoreRequest(request, limits);
    if (valid.ok()) {
      results.push_back(ScoreSequence(request));
    } else {
      results.push_back(valid);
    }
  }
  return results;
}

void ReferenceEngine::ApplyLinear(const DenseLinear& linear, const float* x, int64_t n, float* y) const {
  if (!linear.transforms.empty()) {
    // Online rotations: the input's before the product, the output's after it (transform_config.h).
    std::vector<float> rotated(x, x + n * linear.in_features);
    for (const DenseLinear::Transform& t : linear.transforms) {
      if (!t.output)
        ref::RotateRows(rotated.data(), n, linear.in_features, t.matrix.data(), t.size, t.inverse);
    }
    ApplyProduct(linear, rotated.data(), n, y);
    for (const DenseLinear::Transform& t : linear.transforms) {
      if (t.output) ref::RotateRows(y, n, linear.out_features, t.matrix.data(), t.size, t.inverse);
    }
    return;
  }
  ApplyProduct(linear, x, n, y);
}

void ReferenceEngine::ApplyProduct(const DenseLinear& linear, const float* x, int64_t n, float* y) const {
  const float* bias = linear.bias.empty() ? nullptr : linear.bias.data();
  if (!linear.fake_quantize_input && !linear.int8_input && !linear.static_fp8_input &&
      !linear.static_int8_input) {
    ref::Linear(x, linear.w.data(), bias, n, linear.in_features, linear.out_features, y, &pool_);
    return;
  }
  std::vector<float> quantized(x, x + n * linear.in_features);  // [n, in_features]
  if (linear.static_fp8_input) {
    ref::FakeQuantizeFp8Static(quantized.data(), n * linear.in_features, linear.static_params.scale);
  } else if (linear.static_int8_input) {
    ref::FakeQuantizeInt8Span(quantized.data(), n * linear.in_features, linear.static_params);
  } else if (linear.int8_input) {
    ref::FakeQuantizeInt8PerToken(quantized.data(), n, linear.in_features, linear.int8_input_symmetric);
  } else if (linear.act_group_size > 0) {
    ref::FakeQuantizeFp8PerTokenGroup(quantized.data(), n, linear.in_features, linear.act_group_size);
  } else {
    ref::FakeQuantizeFp8PerToken(quantized.data(), n, linear.in_features);
  }
  ref::Linear(quantized.data(), linear.w.data(), bias, n, linear.in_features, linear.out_features, y, &pool_);
}

void ReferenceEngine::NormRows(const float* x, const std::vector<float>& weight, int64_t rows, int64_t width,
                               float* out, double eps) const {
  const double e = eps > 0.0 ? eps : config_.rms_norm_eps;
  pool_.ParallelFor(
      rows,
      [&](int64_t begin, int64_t end) {
        ref::RmsNorm(x + begin * width, weight.data(), end - begin, width, e, out + begin * width);
      },
      ref::GrainFor(width));
}

// out = act(gate) * up per element, act the plan's (SwiGLU, GeGLU, gpt-oss's clamped SwiGLU). out may alias
// gate.
void ApplyGlu(MlpActivation act, const float* gate, const float* up, int64_t n, int64_t inter, float* out) {
  switch (act) {
    case MlpActivation::kSilu:
      ref::SwiGlu(gate, up, n, inter, out);
      return;
    case MlpActivation::kGeluTanh:
      ref::GeluTanhGlu(gate, up, n, inter, out);
      return;
    case MlpActivation::kClampedSwiGlu:
      ref::ClampedSwiGlu(gate, up, n, inter, out);
      return;
  }
}

void ReferenceEngine::ExpertMlp(MlpActivation act, const DenseSwiGlu& mlp, const float* x, int64_t n,
                                float* y) const {
  const int64_t inter = mlp.gate.out_features;
  std::vector<float> gate(n * inter), up(n * inter);  // [n, inter]
  ApplyLinear(mlp.gate, x, n, gate.data());
  ApplyLinear(mlp.up, x, n, up.data());
  ApplyGlu(act, gate.data(), up.data(), n, inter, gate.data());
  ApplyLinear(mlp.down, gate.data(), n, y);
}

void ReferenceEngine::MoeBlock(const ChannelMixerPlan& mixer, const DenseMoe& moe, const float* x,
                               const float* router_x, int64_t n, float* y) const {
  const ExpertsPlan& plan = mixer.experts;
  const int64_t num_experts = plan.num_experts, k = plan.top_k, h = config_.hidden_size;
  std::vector<float> logits(n * num_experts);  // [n, num_experts], fp32 router logits
  ApplyLinear(moe.router, router_x, n, logits.data());
  std::vector<int32_t> ids(n * k);
  std::vector<float> weights(n * k);
  switch (plan.router) {
    case RouterKind::kSoftmaxTopK:
      ref::MoeRoute(logits.data(), n, num_experts, k, plan.norm_topk_prob, ids.data(), weights.data());
      break;
    case RouterKind::kTopKSoftmax:
      ref::MoeRouteTopKSoftmax(logits.data(), n, num_experts, k, ids.data(), weights.data());
      break;
    case RouterKind::kSigmoidGroupLimited: {
      ref::SigmoidRouting routing;
      routing.correction_bias = moe.correction_bias.empty() ? nullptr : moe.correction_bias.data();
      routing.num_groups = plan.num_groups;
      routing.topk_groups = plan.topk_groups;
      routing.renormalize = plan.norm_topk_prob;
      routing.renorm_epsilon = plan.renorm_epsilon;
      routing.scaling_factor = plan.routed_scaling_factor;
      ref::MoeRouteSigmoid(logits.data(), n, num_experts, k, routing, ids.data(), weights.data());
      break;
    }
  }
  if (plan.per_expert_scale) {  // Gemma 4: the renormalized weights times per_expert_scale[id], in fp32
    for (int64_t s = 0; s < n * k; ++s) weights[s] *= moe.per_expert_scale[ids[s]];
  }
  std::vector<float> expert_out(n * k * h);  // [n, k, hidden_size]
  std::vector<int64_t> slots;                // t * k + j of the tokens routed to expert e
  std::vector<float> rows, out;              // [m, hidden_size]
  for (int64_t e = 0; e < num_experts; ++e) {
    slots.clear();
    for (int64_t s = 0; s < n * k; ++s) {
      if (ids[s] == e) slots.push_back(s);
    }
    if (slots.empty()) continue;
    const int64_t m = static_cast<int64_t>(slots.size());
    rows.resize(m * h);
    out.resize(m * h);
    for (int64_t r = 0; r < m; ++r) std::copy_n(x + (slots[r] / k) * h, h, rows.data() + r * h);
    ExpertMlp(mixer.activation, moe.experts[e], rows.data(), m, out.data());
    for (int64_t r = 0; r < m; ++r) std::copy_n(out.data() + r * h, h, expert_out.data() + slots[r] * h);
  }
  std::vector<float> shared_out, shared_gate;  // shared_gate empty: ungated shared experts
  if (moe.shared) {
    shared_out.resize(n * h);
    ExpertMlp(mixer.activation, moe.shared_expert, x, n, shared_out.data());
  }
  if (moe.shared && plan.shared_expert_gated) {
    shared_gate.resize(n);
    ApplyLinear(moe.shared_gate, x, n, shared_gate.data());
  }
  ref::MoeCombine(expert_out.data(), ids.data(), weights.data(), n, k, h,
                  moe.shared ? shared_out.data() : nullptr,
                  shared_gate.empty() ? nullptr : shared_gate.data(), y);
}

// The activations of one sequence's forward, allocated once and reused by every layer.
struct ReferenceEngine::Scratch {
  // q_width / kv_width: the widest layer's num_heads * head_dim and num_kv_heads * head_dim.
  Scratch(const ModelConfig& c, int64_t q_width, int64_t kv_width, int64_t n)
      : positions(n),
        normed(n * c.hidden_size),
        q(n * q_width),
        k(n * kv_width),
        v(n * kv_width),
        attn(n * q_width),
        delta(n * c.hidden_size),
        gate(n * c.intermediate_size),
        up(n * c.intermediate_size) {
    for (int64_t t = 0; t < n; ++t) positions[t] = static_cast<int32_t>(t);
  }
  std::vector<int32_t> positions;  // [n]: 0 .. n - 1
  std::vector<float> normed;       // [n, hidden_size], the block's normalized input
  std::vector<float> q;            // [n, num_heads, head_dim]
  std::vector<float> k;            // [n, num_kv_heads, head_dim]
  std::vector<float> v;            // [n, num_kv_heads, head_dim]
  std::vector<float> attn;         // [n, num_heads, head_dim]
  std::vector<float> delta;        // [n, hidden_size], the block's output, added into the residual
  std::vector<float> gate;         // [n, intermediate_size]
  std::vector<float> up;           // [n, intermediate_size]
};

void ReferenceEngine::Forward(const std::vector<int32_t>& tokens, std::vector<float>* hidden) const {
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<float>& x = *hidden;  // [n, hidden_size], the residual stream
  x.resize(n * c.hidden_size);
  int64_t q_width = c.num_heads * c.head_dim, kv_width = c.num_kv_heads * c.head_dim;
  for (const LayerPlan& p : plan_.layers) {  // Gemma 4's full layers are wider
    q_width = std::max(q_width, c.num_heads * p.attention.head_dim);
    kv_width = std::max(kv_width, p.attention.num_kv_heads * p.attention.head_dim);
  }
  Scratch s(c, q_width, kv_width, n);
  // Ids were validated by Score().
  ref::Embedding(embed_.data(), tokens.data(), n, c.vocab_size, c.hidden_size, x.data()).IgnoreError();
  if (plan_.embedding_scale > 0.0f) {  // Gemma: times fp32(sqrt(hidden_size)), in fp32
    for (float& e : x) e *= plan_.embedding_scale;
  }
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerPlan& plan = plan_.layers[l];
    const DenseLayer& layer = layers_[l];
    // Token mixer: x += [post-norm](mixer(norm(x))), attention, a Gated DeltaNet or latent attention, the
    // post-norm in the sandwich placement only.
    NormRows(x.data(), layer.input_norm, n, c.hidden_size, s.normed.data());
    if (plan.delta_net_mixer()) {
      DeltaNetBlock(plan.delta_net, layer, n, &s);
    } else if (plan.latent_attention_mixer()) {
      LatentAttentionBlock(plan.latent, layer, n, &s);
    } else {
      AttentionBlock(plan.attention, layer, n, &s);
    }
    if (plan.sandwich())
      NormRows(s.delta.data(), layer.post_attention_norm, n, c.hidden_size, s.delta.data());
    for (int64_t i = 0; i < n * c.hidden_size; ++i) x[i] += s.delta[i];
    // Channel mixer: x += [post-norm](mlp(norm(x))), the dense GLU or the mixture of experts.
    NormRows(x.data(), plan.sandwich() ? layer.pre_ff_norm : layer.post_attention_norm, n, c.hidden_size,
             s.normed.data());
    if (plan.experts() && plan.dense_glu()) {
      ParallelGluAndExperts(plan.channel_mixer, layer, x.data(), n, &s);
    } else if (plan.experts()) {
      MoeBlock(plan.channel_mixer, layer.moe, s.normed.data(), s.normed.data(), n, s.delta.data());
    } else {
      GluMlp(plan.channel_mixer, layer, n, &s);
    }
    if (plan.sandwich()) NormRows(s.delta.data(), layer.post_ff_norm, n, c.hidden_size, s.delta.data());
    for (int64_t i = 0; i < n * c.hidden_size; ++i) x[i] += s.delta[i];
    if (plan.layer_scalar) {  // Gemma 4: hidden_states *= layer_scalar, in fp32
      for (float& e : x) e *= layer.layer_scalar;
    }
  }
  NormRows(x.data(), final_norm_, n, c.hidden_size, x.data());
}

void ReferenceEngine::AttentionBlock(const AttentionPlan& plan, const DenseLayer& layer, int64_t n,
                                     Scratch* s) const {
  const ModelConfig& c = config_;
  const int64_t hd = plan.head_dim, kv_heads = plan.num_kv_heads;
  // The layer's RoPE table; the global one under longrope by this sequence's own length.
  const std::vector<float>& inv_freq = plan.rope == RopeTable::kLocal ? inv_freq_local_
                                       : plan_.LongRopeFor(n)         ? inv_freq_long_
                                                                      : inv_freq_;
  std::vector<float> gate;  // [n, num_heads, head_dim]: the output gate's logits (AttentionPlan::output_gate)
  if (plan.output_gate) {
    const int64_t heads = n * c.num_heads;
    std::vector<float> q_and_gate(heads * 2 * hd);  // per head [q_h | gate_h]
    ApplyLinear(layer.q, s->normed.data(), n, q_and_gate.data());
    gate.resize(heads * hd);
    for (int64_t r = 0; r < heads; ++r) {
      std::copy_n(q_and_gate.data() + r * 2 * hd, hd, s->q.data() + r * hd);
      std::copy_n(q_and_gate.data() + r * 2 * hd + hd, hd, gate.data() + r * hd);
    }
  } else {
    ApplyLinear(layer.q, s->normed.data(), n, s->q.data());
  }
  ApplyLinear(layer.k, s->normed.data(), n, s->k.data());
  if (plan.k_eq_v) {  // Gemma 4's full layers: v is k_proj's output, before k's norm and RoPE
    std::copy_n(s->k.data(), n * kv_heads * hd, s->v.data());
  } else {
    ApplyLinear(layer.v, s->normed.data(), n, s->v.data());
  }
  if (plan.qk_norm) {  // Qwen3, Gemma 3 / 4: RMSNorm over head_dim of every head, before RoPE
    NormRows(s->q.data(), layer.q_norm, n * c.num_heads, hd, s->q.data());
    NormRows(s->k.data(), layer.k_norm, n * kv_heads, hd, s->k.data());
  } else if (plan.qk_norm_whole) {  // MiniMax-M2: over each token's whole q and k rows (MiniMaxM2Attention)
    NormRows(s->q.data(), layer.q_norm, n, c.num_heads * hd, s->q.data());
    NormRows(s->k.data(), layer.k_norm, n, kv_heads * hd, s->k.data());
  }
  if (plan.v_norm) NormRows(s->v.data(), unit_norm_, n * kv_heads, hd, s->v.data());  // Gemma 4, no weight
  ref::Rope(s->q.data(), s->positions.data(), inv_freq.data(), n, c.num_heads, hd, plan.rotary_dim,
            rope_scaling_, plan.rope_interleaved);
  ref::Rope(s->k.data(), s->positions.data(), inv_freq.data(), n, kv_heads, hd, plan.rotary_dim,
            rope_scaling_, plan.rope_interleaved);
  if (layer.k_scale > 0.0f) {  // FP8 KV cache: compressed-tensors' QuantizedKVCache on post-RoPE K and V
    const int64_t kv_width = kv_heads * hd;
    ref::FakeQuantizeFp8Static(s->k.data(), n * kv_width, layer.k_scale);
    ref::FakeQuantizeFp8Static(s->v.data(), n * kv_width, layer.v_scale);
  }
  ref::AttentionOptions options;
  options.window = plan.window;
  options.scale = plan.scale;
  options.softcap = plan.softcap;
  options.sinks = layer.sinks.empty() ? nullptr : layer.sinks.data();
  ref::CausalAttention(s->q.data(), s->k.data(), s->v.data(), n, c.num_heads, kv_heads, hd, s->attn.data(),
                       &pool_, options);
  if (!gate.empty()) {  // attn * sigmoid(gate), in fp32 as transformers
    ref::SigmoidGateMul(s->attn.data(), gate.data(), static_cast<int64_t>(gate.size()));
  }
  ApplyLinear(layer.o, s->attn.data(), n, s->delta.data());
}

void ReferenceEngine::LatentAttentionBlock(const LatentAttentionPlan& plan, const DenseLayer& layer,
                                           int64_t n, Scratch* s) const {
  const DenseLayer::Latent& m = layer.latent;
  const int64_t heads = plan.num_heads, nope = plan.qk_nope_head_dim, rope = plan.qk_rope_head_dim;
  const int64_t qk = plan.qk_head_dim(), rank = plan.kv_lora_rank;
  std::vector<float> q(n * plan.q_width());  // [n, heads, q_nope | q_rope]
  if (plan.q_lora_rank > 0) {                // q_b(RMSNorm(q_a(x)))
    std::vector<float> q_a(n * plan.q_lora_rank);
    ApplyLinear(m.q_a, s->normed.data(), n, q_a.data());
    NormRows(q_a.data(), m.q_a_norm, n, plan.q_lora_rank, q_a.data(), plan.norm_eps);
    ApplyLinear(m.q_b, q_a.data(), n, q.data());
  } else {
    ApplyLinear(layer.q, s->normed.data(), n, q.data());
  }
  std::vector<float> kv_a(n * plan.kv_a_width());  // [n, c | k_rope]
  ApplyLinear(m.kv_a, s->normed.data(), n, kv_a.data());
  std::vector<float> latent(n * rank), k_rope(n * rope), q_rope(n * heads * rope);
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(kv_a.data() + t * plan.kv_a_width(), rank, latent.data() + t * rank);
    std::copy_n(kv_a.data() + t * plan.kv_a_width() + rank, rope, k_rope.data() + t * rope);
  }
  NormRows(latent.data(), m.kv_a_norm, n, rank, latent.data(), plan.norm_eps);
  std::vector<float> kv(n * plan.kv_b_width());  // [n, heads, k_nope | v]
  ApplyLinear(m.kv_b, latent.data(), n, kv.data());
  // RoPE on every head's q_rope and on the shared k_rope (the global table, rotary_dim = qk_rope_head_dim).
  const std::vector<float>& inv_freq = plan_.LongRopeFor(n) ? inv_freq_long_ : inv_freq_;
  for (int64_t r = 0; r < n * heads; ++r)
    std::copy_n(q.data() + r * qk + nope, rope, q_rope.data() + r * rope);
  ref::Rope(q_rope.data(), s->positions.data(), inv_freq.data(), n, heads, rope, rope, rope_scaling_,
            plan.rope_interleaved);
  ref::Rope(k_rope.data(), s->positions.data(), inv_freq.data(), n, 1, rope, rope, rope_scaling_,
            plan.rope_interleaved);
  for (int64_t r = 0; r < n * heads; ++r)
    std::copy_n(q_rope.data() + r * rope, rope, q.data() + r * qk + nope);
  std::vector<float> attn(n * plan.o_width());  // [n, heads, v_head_dim]
  const ref::LatentAttentionShape shape{heads, nope, rope, plan.v_head_dim};
  ref::LatentAttention(q.data(), kv.data(), k_rope.data(), n, shape, plan.scale, attn.data(), &pool_);
  ApplyLinear(layer.o, attn.data(), n, s->delta.data());
}

void ReferenceEngine::FusedDeltaNetProjections(const DeltaNetPlan& plan, const DenseLayer::DeltaNet& d,
                                               int64_t n, const Scratch* s, float* mixed, float* z, float* b,
                                               float* a) const {
  const int64_t hk = plan.num_k_heads, dk = plan.k_head_dim, dv = plan.v_head_dim;
  const int64_t r = plan.num_v_heads / hk, group = 2 * dk + 2 * r * dv, kd = plan.key_dim();
  const int64_t conv = plan.conv_dim(), vd = plan.value_dim(), hv = plan.num_v_heads;
  std::vector<float> qkvz(n * (conv + vd)), ba(n * 2 * hv);
  ApplyLinear(d.in_proj_qkvz, s->normed.data(), n, qkvz.data());
  ApplyLinear(d.in_proj_ba, s->normed.data(), n, ba.data());
  for (int64_t t = 0; t < n; ++t) {  // per k head g: q_g, k_g, v and z of its r v heads; b, a of them
    for (int64_t g = 0; g < hk; ++g) {
      const float* src = qkvz.data() + t * (conv + vd) + g * group;
      std::copy_n(src, dk, mixed + t * conv + g * dk);
      std::copy_n(src + dk, dk, mixed + t * conv + kd + g * dk);
      std::copy_n(src + 2 * dk, r * dv, mixed + t * conv + 2 * kd + g * r * dv);
      std::copy_n(src + 2 * dk + r * dv, r * dv, z + t * vd + g * r * dv);
      const float* src_ba = ba.data() + t * 2 * hv + g * 2 * r;
      std::copy_n(src_ba, r, b + t * hv + g * r);
      std::copy_n(src_ba + r, r, a + t * hv + g * r);
    }
  }
}

void ReferenceEngine::DeltaNetBlock(const DeltaNetPlan& plan, const DenseLayer& layer, int64_t n,
                                    Scratch* s) const {
  const DenseLayer::DeltaNet& d = layer.delta_net;
  const int64_t conv = plan.conv_dim(), kd = plan.key_dim(), vd = plan.value_dim(), hv = plan.num_v_heads;
  std::vector<float> mixed(n * conv), act(n * conv);  // [n, q | k | v]
  std::vector<float> z(n * vd), b(n * hv), a(n * hv);
  if (d.fused) {
    FusedDeltaNetProjections(plan, d, n, s, mixed.data(), z.data(), b.data(), a.data());
  } else {
    ApplyLinear(d.in_proj_qkv, s->normed.data(), n, mixed.data());
    ApplyLinear(d.in_proj_z, s->normed.data(), n, z.data());
    ApplyLinear(d.in_proj_b, s->normed.data(), n, b.data());
    ApplyLinear(d.in_proj_a, s->normed.data(), n, a.data());
  }
  ref::CausalConv1dSilu(mixed.data(), d.conv1d.data(), n, conv, plan.conv_kernel, act.data());
  std::vector<float> q(n * kd), k(n * kd), v(n * vd);
  for (int64_t t = 0; t < n; ++t) {
    const float* row = act.data() + t * conv;
    std::copy_n(row, kd, q.data() + t * kd);
    std::copy_n(row + kd, kd, k.data() + t * kd);
    std::copy_n(row + 2 * kd, vd, v.data() + t * vd);
  }
  ref::L2NormRows(q.data(), n * plan.num_k_heads, plan.k_head_dim, 1e-6);
  ref::L2NormRows(k.data(), n * plan.num_k_heads, plan.k_head_dim, 1e-6);
  const float q_scale = static_cast<float>(std::sqrt(static_cast<double>(plan.k_head_dim)));
  for (float& x : q) x /= q_scale;  // transformers: query / dk ** 0.5
  for (int64_t i = 0; i < n * hv; ++i) {
    const int64_t h = i % hv;
    b[i] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(b[i]))));  // beta = sigmoid(b)
    const float x = a[i] + d.dt_bias[h];  // g = -exp(A_log) * softplus(a + dt_bias), torch's threshold 20
    const float softplus = x > 20.0f ? x : static_cast<float>(std::log1p(std::exp(static_cast<double>(x))));
    a[i] = d.neg_a[h] * softplus;
  }
  std::vector<float> o(n * vd);  // [n, num_v_heads, v_head_dim]
  ref::GatedDeltaRule(q.data(), k.data(), v.data(), a.data(), b.data(), n, plan.num_k_heads, hv,
                      plan.k_head_dim, plan.v_head_dim, o.data());
  ref::GatedRmsNorm(o.data(), z.data(), d.norm.data(), n * hv, plan.v_head_dim, config_.rms_norm_eps,
                    o.data());
  ApplyLinear(d.out_proj, o.data(), n, s->delta.data());
}

void ReferenceEngine::ParallelGluAndExperts(const ChannelMixerPlan& plan, const DenseLayer& layer,
                                            const float* residual, int64_t n, Scratch* s) const {
  const int64_t h = config_.hidden_size;
  GluMlp(plan, layer, n, s);  // the dense GLU of pre_ff_norm(r), already in s->normed
  NormRows(s->delta.data(), layer.dense_post_norm, n, h, s->delta.data());
  // The router's input: fp32(fp32(RMSNorm_no_weight(r) * scale) * fp32(h^-0.5)) (Gemma4TextRouter.forward).
  std::vector<float> router_x(n * h), experts_in(n * h), experts_out(n * h);
  NormRows(residual, unit_norm_, n, h, router_x.data());
  const float root = static_cast<float>(std::pow(static_cast<double>(h), -0.5));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < h; ++i) {
      float& v = router_x[t * h + i];
      v = (v * layer.moe.router_scale[i]) * root;
    }
  }
  NormRows(residual, layer.experts_pre_norm, n, h, experts_in.data());
  MoeBlock(plan, layer.moe, experts_in.data(), router_x.data(), n, experts_out.data());
  NormRows(experts_out.data(), layer.experts_post_norm, n, h, experts_out.data());
  for (int64_t i = 0; i < n * h; ++i) s->delta[i] += experts_out[i];
}

void ReferenceEngine::GluMlp(const ChannelMixerPlan& plan, const DenseLayer& layer, int64_t n,
                             Scratch* s) const {
  ApplyLinear(layer.gate, s->normed.data(), n, s->gate.data());
  ApplyLinear(layer.up, s->normed.data(), n, s->up.data());
  ApplyGlu(plan.activation, s->gate.data(), s->up.data(), n, plan.intermediate_size, s->gate.data());
  ApplyLinear(layer.down, s->gate.data(), n, s->delta.data());
}

ScoreResult ReferenceEngine::ScoreSequence(const ScoreRequest& request) const {
  const int64_t n = static_cast<int64_t>(request.tokens.size());
  const int64_t first = std::max<int64_t>(1, request.score_from);  // first scored position
  const int64_t num_scored = n - first;
  const int64_t vocab = config_.vocab_size;
  std::vector<float> hidden;  // [n, hidden_size]
  Forward(request.tokens, &hidden);

  std::vector<ref::TokenScore> scores(num_scored);
  std::vector<float> logits(kLogitChunk * vocab);  // [kLogitChunk, vocab_size]
  for (int64_t chunk = 0; chunk < num_scored; chunk += kLogitChunk) {
    const int64_t rows = std::min(kLogitChunk, num_scored - chunk);
    // Position j = first + chunk + r is predicted from the hidden state of j - 1.
    Logits(hidden.data() + (first + chunk - 1) * config_.hidden_size, rows, logits.data());
    // An exp costs about as much as 8 multiply-adds.
    pool_.ParallelFor(
        rows,
        [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const int64_t j = first + chunk + r;
            const int32_t* candidates =
                request.num_candidates > 0
                    ? request.candidate_ids.data() + (chunk + r) * int64_t{request.num_candidates}
                    : nullptr;
            scores[chunk + r] = ref::ScoreLogits(
                logits.data() + r * vocab, vocab, request.tokens[j], request.top_k, request.want_rank,
                request.want_entropy, candidates, request.num_candidates, request.want_min_logprob);
          }
        },
        ref::GrainFor(8 * vocab));
  }

  ScoreResult result;
  result.num_scored = static_cast<int32_t>(num_scored);
  result.logprob.resize(num_scored);
  result.greedy.resize(num_scored);
  if (request.want_rank) result.rank.resize(num_scored);
  if (request.want_entropy) result.entropy.resize(num_scored);
  if (request.top_k > 0) result.top_k.resize(num_scored);
  result.candidate_logprob.reserve(num_scored * int64_t{request.num_candidates});
  if (request.want_min_logprob) result.min_logprob.resize(num_scored);
  for (int64_t i = 0; i < num_scored; ++i) {
    ref::TokenScore& s = scores[i];
    result.candidate_logprob.insert(result.candidate_logprob.end(), s.candidate_logprob.begin(),
                                    s.candidate_logprob.end());
    if (request.want_min_logprob) result.min_logprob[i] = s.min_logprob;
    result.logprob[i] = static_cast<float>(s.logprob);
    result.sum_logprob += s.logprob;
    result.greedy[i] = s.greedy ? 1 : 0;
    if (request.want_rank) result.rank[i] = s.rank;
    if (request.want_entropy) result.entropy[i] = static_cast<float>(s.entropy);
    if (request.top_k > 0) result.top_k[i] = std::move(s.top_k);
  }
  if (request.want_reference) CompareWithBaseline(request.tokens, first, hidden, &result);
  return result;
}

void ReferenceEngine::Logits(const float* hidden, int64_t rows, float* logits) const {
  ApplyLinear(lm_head_, hidden, rows, logits);
  if (plan_.final_logit_softcap > 0.0f) {  // Gemma 2
    ref::SoftCap(logits, rows * config_.vocab_size, plan_.final_logit_softcap);
  }
}

void ReferenceEngine::CompareWithBaseline(const std::vector<int32_t>& tokens, int64_t first,
                                          const std::vector<float>& hidden, ScoreResult* result) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t num_scored = n - first;
  const int64_t vocab = config_.vocab_size;
  std::vector<float> ref_hidden;  // [n, hidden_size] of R
  reference_->Forward(tokens, &ref_hidden);
  const int64_t ref_hidden_size = reference_->config_.hidden_size;

  std::vector<ref::BaselineComparison> compared(num_scored);
  std::vector<float> logits(kLogitChunk * vocab);      // [kLogitChunk, vocab_size], Q's
  std::vector<float> ref_logits(kLogitChunk * vocab);  // [kLogitChunk, vocab_size], R's
  for (int64_t chunk = 0; chunk < num_scored; chunk += kLogitChunk) {
    const int64_t rows = std::min(kLogitChunk, num_scored - chunk);
    Logits(hidden.data() + (first + chunk - 1) * config_.hidden_size, rows, logits.data());
    reference_->Logits(ref_hidden.data() + (first + chunk - 1) * ref_hidden_size, rows, ref_logits.data());
    // Two log-sum-exps and one more exp per logit: about 24 multiply-adds.
    pool_.ParallelFor(
        rows,
        [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            compared[chunk + r] = ref::CompareWithBaseline(
                ref_logits.data() + r * vocab, logits.data() + r * vocab, vocab, tokens[first + chunk + r]);
          }
        },
        ref::GrainFor(24 * vocab));
  }
  result->ref_logprob.resize(num_scored);
  result->kld.resize(num_scored);
  result->ref_greedy.resize(num_scored);
  result->same_top.resize(num_scored);
  for (int64_t i = 0; i < num_scored; ++i) {
    const ref::BaselineComparison& c = compared[i];
    result->ref_logprob[i] = static_cast<float>(c.ref_logprob);
    result->kld[i] = static_cast<float>(c.kld);
    result->ref_greedy[i] = c.ref_greedy ? 1 : 0;
    result->same_top[i] = c.same_top ? 1 : 0;
    result->sum_ref_logprob += c.ref_logprob;
    result->sum_kld += c.kld;
  }
}

}  // namespace

namespace {

absl::StatusOr<std::unique_ptr<ReferenceEngine>> LoadOne(const EngineOptions& options) {
  SCORED_ASSIGN_OR_RETURN(std::unique_ptr<ModelWeights> weights, ModelWeights::Load(options.model_dir));
  int num_threads = options.num_threads;
  if (num_threads <= 0) num_threads = UsableCpus();
  auto engine = std::make_unique<ReferenceEngine>(weights->config(), weights->plan(), num_threads);
  SCORED_RETURN_IF_ERROR(engine->Load(*weights, options));
  return engine;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> CreateReferenceEngine(const EngineOptions& options) {
  SCORED_ASSIGN_OR_RETURN(std::unique_ptr<ReferenceEngine> engine, LoadOne(options));
  if (!options.reference_model_dir.empty()) {
    // R's config first: a vocabulary mismatch is reported before R's weights are read. R is then loaded by
    // the same code path as Q, from its own folder.
    SCORED_ASSIGN_OR_RETURN(const ModelConfig reference_config, LoadModelConfig(options.reference_model_dir));
    SCORED_RETURN_IF_ERROR(CheckBaselineVocabulary(engine->vocab_size(), reference_config.vocab_size));
    EngineOptions reference_options = options;
    reference_options.model_dir = options.reference_model_dir;
    reference_options.reference_model_dir.clear();
    absl::StatusOr<std::unique_ptr<ReferenceEngine>> reference = LoadOne(reference_options);
    if (!reference.ok()) {
      return absl::Status(reference.status().code(),
                          absl::StrCat("loading the reference model from ", options.reference_model_dir, ": ",
                                       reference.status().message()));
    }
    SCORED_RETURN_IF_ERROR(engine->SetBaseline(*std::move(reference)));
  }
  return std::unique_ptr<Engine>(std::move(engine));
}

}  // namespace scored

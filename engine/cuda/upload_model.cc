#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/logging.h"
#include "engine/base/status_macros.h"
#include "engine/cuda/device_linear.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/moe_upload.h"
#include "engine/cuda/rotation_tables.h"
#include "engine/model/layer_plan.h"
#include "engine/model/rope_freq.h"
#include "engine/model/shard_plan.h"

namespace scored::cuda {

namespace {

// A norm weight (or a bias) widened to fp32; Gemma's (ModelPlan::offset_norms) stored as fp32(1 + weight),
// what its RMSNorm multiplies by (ref::OffsetNormWeight: the same fp32 add).
absl::StatusOr<DeviceBuffer> UploadNorm(const TensorView& t, const std::string& what, bool offset) {
  std::vector<float> host(t.NumElements());
  SCORED_RETURN_IF_ERROR(TensorToFloat(t, host.data(), static_cast<int64_t>(host.size())));
  if (offset) {
    for (float& w : host) w = 1.0f + w;
  }
  return UploadToDevice(host.data(), static_cast<int64_t>(host.size() * sizeof(float)), what);
}

absl::StatusOr<DeviceBuffer> UploadFloats(const std::vector<float>& host, const std::string& what) {
  return UploadToDevice(host.data(), static_cast<int64_t>(host.size() * sizeof(float)), what);
}

// Once a tensor is on the GPU its mmapped pages leave the process's RSS (they stay in the page cache), so
// host memory during the load stays near one layer's pages instead of growing to the checkpoint's size.
void ReleaseLinearPages(const TensorStore& store, const LinearWeight& w) {
  for (const TensorView* t : {&w.weight, &w.weight_packed, &w.weight_scale, &w.weight_zero_point,
                              &w.weight_g_idx, &w.weight_global_scale, &w.input_global_scale, &w.bias}) {
    store.ReleaseResidentPages(*t);
  }
}

void ReleaseLayerPages(const TensorStore& store, const LayerWeights& src) {
  scored::ForEachLinear(src, [&store](const LinearWeight& w, LinearRole) { ReleaseLinearPages(store, w); });
  for (const TensorView* t : {&src.input_layernorm, &src.post_attention_layernorm, &src.q_norm, &src.k_norm,
                              &src.pre_feedforward_layernorm, &src.post_feedforward_layernorm}) {
    if (t->present()) store.ReleaseResidentPages(*t);
  }
}

int64_t ResidentBytes(const DeviceModel& model) {
  int64_t bytes = model.embed.bytes() + model.final_norm.bytes() + model.rope_inv_freq.bytes() +
                  model.rope_inv_freq_long.bytes() + model.rope_inv_freq_local.bytes() +
                  model.lm_head.DeviceBytes();
  for (const DeviceLayer& layer : model.layers) {
    bytes += layer.input_norm.bytes() + layer.post_norm.bytes() + layer.q_norm.bytes() +
             layer.k_norm.bytes() + layer.qkv_bias.bytes() + layer.o_bias.bytes() +
             layer.pre_ff_norm.bytes() + layer.post_ff_norm.bytes() + layer.delta_net.conv1d.bytes() +
             layer.delta_net.neg_a.bytes() + layer.delta_net.dt_bias.bytes() + layer.delta_net.norm.bytes() +
             layer.latent.q_a_norm.bytes() + layer.latent.kv_a_norm.bytes();
    ForEachLinear(layer,
                  [&bytes](const DeviceLinear& linear, DeviceLinearRole) { bytes += linear.DeviceBytes(); });
  }
  for (const DeviceBuffer& table : model.rotation_tables) bytes += table.bytes();
  return bytes;
}

// The RoPE frequencies: the model's (RopeInvFreq), longrope's long factors, the local layers' (Gemma 3), and
// longrope's attention factor.
absl::Status UploadRopeFrequencies(const ModelConfig& config, const ModelPlan& plan, DeviceModel* model) {
  SCORED_ASSIGN_OR_RETURN(model->rope_inv_freq,
                          UploadFloats(RopeInvFreq(config), "the RoPE frequency table"));
  if (config.rope_scaling.type == RopeType::kLongrope) {
    SCORED_ASSIGN_OR_RETURN(model->rope_inv_freq_long,
                            UploadFloats(RopeInvFreqForLength(config, std::numeric_limits<int64_t>::max()),
                                         "the RoPE frequency table of long sequences"));
  }
  if (plan.local_rope) {
    SCORED_ASSIGN_OR_RETURN(model->rope_inv_freq_local,
                            UploadFloats(RopeInvFreq(RopeTableConfig(config, RopeTable::kLocal)),
                                         "the local layers' RoPE frequency table"));
  }
  model->rope_scaling = RopeAttentionScaling(config);
  return absl::OkStatus();
}

// A layer's norm weights: which optional ones exist follows its plan (layer_plan.h).
absl::Status UploadLayerNorms(const ModelPlan& model_plan, const LayerPlan& layer_plan,
                              const LayerWeights& src, const std::string& prefix, DeviceLayer* dst) {
  const bool offset = model_plan.offset_norms;
  SCORED_ASSIGN_OR_RETURN(dst->input_norm,
                          UploadNorm(src.input_layernorm, prefix + "input_layernorm", offset));
  SCORED_ASSIGN_OR_RETURN(
      dst->post_norm, UploadNorm(src.post_attention_layernorm, prefix + "post_attention_layernorm", offset));
  if (layer_plan.sandwich()) {
    SCORED_ASSIGN_OR_RETURN(dst->pre_ff_norm, UploadNorm(src.pre_feedforward_layernorm,
                                                         prefix + "pre_feedforward_layernorm", offset));
    SCORED_ASSIGN_OR_RETURN(dst->post_ff_norm, UploadNorm(src.post_feedforward_layernorm,
                                                          prefix + "post_feedforward_layernorm", offset));
  }
  if (layer_plan.attention.qk_norm || layer_plan.attention.qk_norm_whole) {  // per head, or whole rows
    SCORED_ASSIGN_OR_RETURN(dst->q_norm, UploadNorm(src.q_norm, prefix + "self_attn.q_norm", offset));
    SCORED_ASSIGN_OR_RETURN(dst->k_norm, UploadNorm(src.k_norm, prefix + "self_attn.k_norm", offset));
  }
  return absl::OkStatus();
}

// Qwen3-Next's in_proj_qkvz / in_proj_ba, rows grouped per k head g ([q_g | k_g | v of its r v heads | z of
// them] and [b of them | a of them], transformers' fix_query_key_value_ordering), restacked into the row
// order of Qwen3.5's four projections (q|k|v, z, b, a) as row views (ShardLinear's column-parallel slices),
// so the one GEMM and delta_net_block.cc are the same for both.
absl::Status UploadFusedDeltaNetProjections(const DeltaNetPlan& plan, const DeltaNetWeights& src,
                                            ComputeDtype dtype, const std::string& prefix, DeviceLayer* dst) {
  const int64_t hk = plan.num_k_heads, dk = plan.k_head_dim, dv = plan.v_head_dim;
  const int64_t r = plan.num_v_heads / hk, group = 2 * dk + 2 * r * dv;
  // Each entry: the fused linear, the offset of the piece inside a group, its rows, the group's stride.
  struct Piece {
    const LinearWeight* w;
    int64_t offset, rows, stride;
  };
  const Piece pieces[] = {{&src.in_proj_qkvz, 0, dk, group},
                          {&src.in_proj_qkvz, dk, dk, group},
                          {&src.in_proj_qkvz, 2 * dk, r * dv, group},
                          {&src.in_proj_qkvz, 2 * dk + r * dv, r * dv, group},
                          {&src.in_proj_ba, 0, r, 2 * r},
                          {&src.in_proj_ba, r, r, 2 * r}};
  std::deque<ShardedLinear> parts;
  for (const Piece& p : pieces) {
    for (int64_t g = 0; g < hk; ++g) {
      const int64_t r0 = g * p.stride + p.offset;
      SCORED_ASSIGN_OR_RETURN(
          ShardedLinear part,
          ShardLinear(*p.w, {ShardKind::kColumnParallel, r0, r0 + p.rows}, /*tp_rank=*/0));
      parts.push_back(std::move(part));
    }
  }
  std::vector<const LinearWeight*> members;
  for (const ShardedLinear& part : parts) members.push_back(&part.view);
  SCORED_ASSIGN_OR_RETURN(dst->qkv, DeviceModelLoader::Build(members, dtype,
                                                             prefix + "linear_attn in_proj_qkvz|in_proj_ba "
                                                                      "as q|k|v|z|b|a"));
  return absl::OkStatus();
}

// A Gated DeltaNet layer (LayerPlan::delta_net_mixer): its four input projections fused into dst->qkv (rows
// q|k|v, z, b, a: the layout delta_net_block.cc reads), out_proj as dst->o, the small tensors in fp32.
absl::Status UploadDeltaNet(const DeltaNetPlan& plan, const DeltaNetWeights& src, ComputeDtype dtype,
                            const std::string& prefix, DeviceLayer* dst) {
  const std::vector<const LinearWeight*> linears =
      src.fused ? std::vector<const LinearWeight*>{&src.in_proj_qkvz, &src.in_proj_ba, &src.out_proj}
                : std::vector<const LinearWeight*>{&src.in_proj_qkv, &src.in_proj_z, &src.in_proj_b,
                                                   &src.in_proj_a, &src.out_proj};
  for (const LinearWeight* w : linears) {
    if (!w->transforms.empty()) {
      return absl::UnimplementedError(
          absl::StrCat(w->module, ": transform_config rotations of a Gated DeltaNet ",
                       "layer are not implemented on the CUDA backend; use --backend=cpu"));
    }
  }
  dst->delta_net_mixer = true;
  if (src.fused) {
    SCORED_RETURN_IF_ERROR(UploadFusedDeltaNetProjections(plan, src, dtype, prefix, dst));
  } else {
    SCORED_ASSIGN_OR_RETURN(
        dst->qkv, DeviceModelLoader::Build({&src.in_proj_qkv, &src.in_proj_z, &src.in_proj_b, &src.in_proj_a},
                                           dtype, prefix + "linear_attn in_proj q|k|v|z|b|a"));
  }
  SCORED_ASSIGN_OR_RETURN(
      dst->o, DeviceModelLoader::Build({&src.out_proj}, dtype, prefix + "linear_attn.out_proj", false,
                                       GemmTypes::kFp8ToFp32));
  DeviceDeltaNet& d = dst->delta_net;
  SCORED_ASSIGN_OR_RETURN(d.conv1d, UploadNorm(src.conv1d, prefix + "linear_attn.conv1d.weight", false));
  std::vector<float> neg_a(static_cast<size_t>(plan.num_v_heads));
  SCORED_RETURN_IF_ERROR(TensorToFloat(src.a_log, neg_a.data(), plan.num_v_heads));
  for (float& a : neg_a) a = -std::exp(a);  // as ReferenceEngine::DecodeLayer: fp32 exp
  SCORED_ASSIGN_OR_RETURN(d.neg_a, UploadFloats(neg_a, prefix + "linear_attn.A_log"));
  SCORED_ASSIGN_OR_RETURN(d.dt_bias, UploadNorm(src.dt_bias, prefix + "linear_attn.dt_bias", false));
  SCORED_ASSIGN_OR_RETURN(d.norm, UploadNorm(src.norm, prefix + "linear_attn.norm.weight", false));
  return absl::OkStatus();
}

// A multi-head latent attention layer (LayerPlan::latent_attention_mixer): q_a_proj (or q_proj without
// q_lora_rank) and kv_a_proj_with_mqa as one GEMM into dst->qkv, their biases (LatentAttentionPlan::a_bias;
// q_proj has none) as dst->qkv_bias, q_b / kv_b and the two norms as dst->latent, o_proj as dst->o (its bias
// as the caller uploads o_bias). Without tensor parallelism (the plan refuses --tp for it).
absl::Status UploadLatentAttention(const LatentAttentionPlan& plan, const LayerWeights& src,
                                   ComputeDtype dtype, const std::string& prefix, DeviceLayer* dst) {
  const LatentAttentionWeights& w = src.latent;
  const bool q_lora = plan.q_lora_rank > 0;
  const LinearWeight& q_in = q_lora ? w.q_a_proj : src.q_proj;
  for (const LinearWeight* l : {&q_in, &w.q_b_proj, &w.kv_a_proj, &w.kv_b_proj, &src.o_proj}) {
    if (!l->transforms.empty()) {
      return absl::UnimplementedError(
          absl::StrCat(l->module,
                       ": transform_config rotations of a latent attention layer "
                       "are not implemented on the CUDA backend; use --backend=cpu"));
    }
  }
  dst->latent_mixer = true;
  DeviceLatentAttention& d = dst->latent;
  d.q_lora = q_lora;
  SCORED_ASSIGN_OR_RETURN(
      dst->qkv, DeviceModelLoader::Build({&q_in, &w.kv_a_proj}, dtype, prefix + "self_attn q_a|kv_a"));
  if (plan.a_bias) {
    const int64_t nq = q_in.out_features, nkv = w.kv_a_proj.out_features;
    std::vector<float> bias(static_cast<size_t>(nq + nkv), 0.0f);
    if (q_lora) SCORED_RETURN_IF_ERROR(TensorToFloat(q_in.bias, bias.data(), nq));
    SCORED_RETURN_IF_ERROR(TensorToFloat(w.kv_a_proj.bias, bias.data() + nq, nkv));
    SCORED_ASSIGN_OR_RETURN(dst->qkv_bias, UploadToDevice(bias.data(), static_cast<int64_t>(bias.size() * 4),
                                                          prefix + "self_attn q_a|kv_a bias"));
  }
  if (q_lora) {
    SCORED_ASSIGN_OR_RETURN(d.q_b,
                            DeviceModelLoader::Build({&w.q_b_proj}, dtype, prefix + "self_attn.q_b_proj"));
    SCORED_ASSIGN_OR_RETURN(d.q_a_norm,
                            UploadNorm(w.q_a_layernorm, prefix + "self_attn.q_a_layernorm.weight", false));
  }
  SCORED_ASSIGN_OR_RETURN(d.kv_b,
                          DeviceModelLoader::Build({&w.kv_b_proj}, dtype, prefix + "self_attn.kv_b_proj"));
  SCORED_ASSIGN_OR_RETURN(d.kv_a_norm,
                          UploadNorm(w.kv_a_layernorm, prefix + "self_attn.kv_a_layernorm.weight", false));
  SCORED_ASSIGN_OR_RETURN(dst->o, DeviceModelLoader::Build({&src.o_proj}, dtype, prefix + "self_attn.o_proj",
                                                           false, GemmTypes::kFp8ToFp32));
  return absl::OkStatus();
}

// The gated attention's q|k|v|gate (AttentionPlan::output_gate): q_proj's rows are [q_h | gate_h] per head;
// dst->qkv stacks every head's q rows, then k, v, then every head's gate rows (context.h's qkv row), cut as
// row views of q_proj (ShardLinear's column-parallel slices; no copy of a view-able format).
absl::Status UploadGatedQkv(const LinearWeight& q, const LinearWeight& k, const LinearWeight& v,
                            int64_t heads, int64_t head_dim, ComputeDtype dtype, const std::string& prefix,
                            DeviceLayer* dst) {
  for (const LinearWeight* w : {&q, &k, &v}) {
    if (!w->transforms.empty() || w->bias.present()) {
      return absl::UnimplementedError(absl::StrCat(w->module,
                                                   ": a bias or transform_config rotation on the gated ",
                                                   "attention is not implemented on the CUDA backend; use "
                                                   "--backend=cpu"));
    }
  }
  std::deque<ShardedLinear> parts;
  std::vector<const LinearWeight*> members;
  for (int half = 0; half < 2; ++half) {  // 0: the q rows of every head, 1: the gate rows
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t r0 = (2 * h + half) * head_dim;
      SCORED_ASSIGN_OR_RETURN(ShardedLinear part,
                              ShardLinear(q, {ShardKind::kColumnParallel, r0, r0 + head_dim}, /*tp_rank=*/0));
      parts.push_back(std::move(part));
    }
  }
  for (int64_t h = 0; h < heads; ++h) members.push_back(&parts[static_cast<size_t>(h)].view);
  members.push_back(&k);
  members.push_back(&v);
  for (int64_t h = 0; h < heads; ++h) members.push_back(&parts[static_cast<size_t>(heads + h)].view);
  SCORED_ASSIGN_OR_RETURN(dst->qkv,
                          DeviceModelLoader::Build(members, dtype, prefix + "self_attn q|k|v|gate"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceModel>> UploadModel(const ModelWeights& weights, ComputeDtype dtype,
                                                         const ShardPlan* plan, bool kv_cache_quant) {
  UploadOptions options;
  options.kv_cache_quant = kv_cache_quant;
  return UploadModel(weights, dtype, plan, options);
}

absl::StatusOr<std::unique_ptr<DeviceModel>> UploadModel(const ModelWeights& weights, ComputeDtype dtype,
                                                         const ShardPlan* plan,
                                                         const UploadOptions& options) {
  const ModelConfig& config = weights.config();
  auto model = std::make_unique<DeviceModel>();
  model->dtype = dtype;
  model->options = options;
  LinearCutter cut(plan);
  const TensorStore& store = weights.store();
  auto release = [&](const LinearWeight& w) { ReleaseLinearPages(store, w); };

  const int64_t vocab_rows = plan != nullptr ? plan->vocab_end - plan->vocab_begin : config.vocab_size;
  LinearWeight embed;
  embed.module = "model.embed_tokens";
  embed.out_features = vocab_rows;
  embed.in_features = config.hidden_size;
  if (plan != nullptr) {
    SCORED_ASSIGN_OR_RETURN(embed.weight, ShardEmbedding(weights.embed_tokens(), *plan));
  } else {
    embed.weight = weights.embed_tokens();
  }
  SCORED_ASSIGN_OR_RETURN(
      model->embed,
      DeviceBuffer::Allocate(vocab_rows * config.hidden_size * ElementBytes(dtype), "the token embedding"));
  SCORED_RETURN_IF_ERROR(UploadDenseInto(embed, dtype, model->embed.data()));
  store.ReleaseResidentPages(weights.embed_tokens());
  SCORED_ASSIGN_OR_RETURN(model->final_norm,
                          UploadNorm(weights.final_norm(), "model.norm.weight", weights.plan().offset_norms));
  SCORED_RETURN_IF_ERROR(UploadRopeFrequencies(config, weights.plan(), model.get()));
  RotationTables rotations;
  if (!weights.lm_head().transforms.empty()) {
    return absl::UnimplementedError(
        "lm_head: transform_config's rotations of the lm_head are not implemented on the CUDA backend; use "
        "--backend=cpu");
  }
  if (config.tie_word_embeddings) {
    DeviceModelLoader::TieTo(&model->lm_head, model->embed, vocab_rows, config.hidden_size);
  } else {
    SCORED_ASSIGN_OR_RETURN(const LinearWeight* head, cut.Cut(weights.lm_head(), LinearRole::kLmHead));
    SCORED_ASSIGN_OR_RETURN(model->lm_head, DeviceModelLoader::Build({head}, dtype, "lm_head", false,
                                                                     GemmTypes::kFp8ToFp32, false));
    SCORED_RETURN_IF_ERROR(DeviceModelLoader::MakeResident(&model->lm_head, dtype, "lm_head"));
    release(weights.lm_head());
    cut.Clear();
  }

  model->layers.resize(weights.layers().size());
  for (size_t l = 0; l < weights.layers().size(); ++l) {
    const LayerWeights& src = weights.layers()[l];
    DeviceLayer& dst = model->layers[l];
    const std::string prefix = absl::StrCat("model.layers.", l, ".");
    if (weights.kv_cache_fp8() && options.kv_cache_quant) {
      SCORED_RETURN_IF_ERROR(TensorToFloat(src.k_scale, &dst.k_scale, 1));
      SCORED_RETURN_IF_ERROR(TensorToFloat(src.v_scale, &dst.v_scale, 1));
    }
    const LayerPlan& layer_plan = weights.plan().layers[l];
    if (layer_plan.delta_net_mixer()) {
      SCORED_RETURN_IF_ERROR(UploadDeltaNet(layer_plan.delta_net, src.delta_net, dtype, prefix, &dst));
    }
    // This layer's shards (host copies of row-parallel slices) live in `cut` until the end of the iteration.
    // (A Gated DeltaNet layer has no q / k / v / o: their cuts are of empty weights, unused.)
    SCORED_ASSIGN_OR_RETURN(const LinearWeight* q, cut.Cut(src.q_proj, LinearRole::kQ));
    SCORED_ASSIGN_OR_RETURN(const LinearWeight* k, cut.Cut(src.k_proj, LinearRole::kK));
    SCORED_ASSIGN_OR_RETURN(const LinearWeight* v, cut.Cut(src.v_proj, LinearRole::kV));
    SCORED_ASSIGN_OR_RETURN(const LinearWeight* o, cut.Cut(src.o_proj, LinearRole::kO));
    const bool o_amax = cut.last_act_amax_all_reduce();
    dst.sparse = layer_plan.experts();
    const LinearWeight *gate = nullptr, *up = nullptr, *down = nullptr;
    bool down_amax = false;
    if (!dst.sparse) {
      SCORED_ASSIGN_OR_RETURN(gate, cut.Cut(src.gate_proj, LinearRole::kGate));
      SCORED_ASSIGN_OR_RETURN(up, cut.Cut(src.up_proj, LinearRole::kUp));
      SCORED_ASSIGN_OR_RETURN(down, cut.Cut(src.down_proj, LinearRole::kDown));
      down_amax = cut.last_act_amax_all_reduce();
    }
    SCORED_RETURN_IF_ERROR(UploadLayerNorms(weights.plan(), layer_plan, src, prefix, &dst));
    if (layer_plan.attention.qkv_bias) {
      const int64_t nq = q->out_features, nk = k->out_features, nv = v->out_features;
      std::vector<float> bias(nq + nk + nv);
      SCORED_RETURN_IF_ERROR(TensorToFloat(q->bias, bias.data(), nq));
      SCORED_RETURN_IF_ERROR(TensorToFloat(k->bias, bias.data() + nq, nk));
      SCORED_RETURN_IF_ERROR(TensorToFloat(v->bias, bias.data() + nq + nk, nv));
      SCORED_ASSIGN_OR_RETURN(dst.qkv_bias, UploadToDevice(bias.data(), static_cast<int64_t>(bias.size() * 4),
                                                           prefix + "self_attn q|k|v bias"));
    }
    if ((layer_plan.attention.o_bias || layer_plan.latent.o_bias) &&
        o->bias.present()) {  // tp: the shard plan leaves it to rank 0
      SCORED_ASSIGN_OR_RETURN(dst.o_bias, UploadNorm(o->bias, prefix + "self_attn.o_proj.bias", false));
    }
    if (layer_plan.delta_net_mixer()) {
      // UploadDeltaNet above
    } else if (layer_plan.latent_attention_mixer()) {
      SCORED_RETURN_IF_ERROR(UploadLatentAttention(layer_plan.latent, src, dtype, prefix, &dst));
    } else if (layer_plan.attention.output_gate) {
      SCORED_RETURN_IF_ERROR(
          UploadGatedQkv(*q, *k, *v, config.num_heads, config.head_dim, dtype, prefix, &dst));
      SCORED_ASSIGN_OR_RETURN(dst.o, DeviceModelLoader::Build({o}, dtype, prefix + "self_attn.o_proj", o_amax,
                                                              GemmTypes::kFp8ToFp32));
    } else {
      SCORED_ASSIGN_OR_RETURN(dst.qkv,
                              DeviceModelLoader::Build({q, k, v}, dtype, prefix + "self_attn q|k|v"));
      SCORED_ASSIGN_OR_RETURN(dst.o, DeviceModelLoader::Build({o}, dtype, prefix + "self_attn.o_proj", o_amax,
                                                              GemmTypes::kFp8ToFp32));
      // transform_config's online rotations: an output rotation runs after the GEMM only where the output is
      // written in the compute dtype with no bias to add after it (q|k|v without a bias, gate|up).
      SCORED_RETURN_IF_ERROR(
          rotations.Attach({q, k, v}, prefix + "self_attn q|k|v", !layer_plan.attention.qkv_bias, &dst.qkv));
      SCORED_RETURN_IF_ERROR(rotations.Attach({o}, prefix + "self_attn.o_proj", false, &dst.o));
    }
    if (dst.sparse) {  // (BuildMoe clears `cut` expert by expert: q / k / v / o are not read after this)
      SCORED_RETURN_IF_ERROR(BuildMoe(layer_plan.channel_mixer.experts, src.moe, dtype, prefix, options, &cut,
                                      &rotations, &dst.moe));
    } else {
      SCORED_ASSIGN_OR_RETURN(dst.gate_up,
                              DeviceModelLoader::Build({gate, up}, dtype, prefix + "mlp gate|up"));
      SCORED_ASSIGN_OR_RETURN(dst.down, DeviceModelLoader::Build({down}, dtype, prefix + "mlp.down_proj",
                                                                 down_amax, GemmTypes::kFp8ToFp32));
      SCORED_RETURN_IF_ERROR(rotations.Attach({gate, up}, prefix + "mlp gate|up", true, &dst.gate_up));
      SCORED_RETURN_IF_ERROR(rotations.Attach({down}, prefix + "mlp.down_proj", false, &dst.down));
    }
    ReleaseLayerPages(store, src);
    cut.Clear();
    for (const DeviceLinear* linear : LinearsInOrder(dst, /*skip_grouped_experts=*/true)) {
      if (linear->uses_scratch()) {
        model->max_scratch_elements =
            std::max(model->max_scratch_elements, linear->out_features() * linear->in_features());
      }
      if (linear->fp8_resident() || linear->int8_resident()) {
        model->max_fp8_in_features = std::max(model->max_fp8_in_features, linear->in_features());
      }
    }
  }

  model->rotation_tables = rotations.Release();
  model->resident_bytes = ResidentBytes(*model);
  const std::string moe = GroupedExpertsNote(*model);
  if (!moe.empty()) {  // which MoE path runs (DeviceMoe::grouped), for the benchmarks' and tests' logs
    SCORED_LOG(INFO) << "mixture of experts: " << moe;
  }
  return model;
}

int64_t EstimateDeviceBytes(const ModelWeights& weights, ComputeDtype dtype, int tp_size) {
  const ModelConfig& config = weights.config();
  const int64_t act = dtype == ComputeDtype::kBf16 ? 2 : 4;
  const auto linear_bytes = [act](const LinearWeight& w) {
    return w.format == WeightFormat::kDense ? w.NumElements() * act : w.StoredBytes();
  };
  int64_t bytes = config.vocab_size * config.hidden_size * act;  // the embedding
  if (!config.tie_word_embeddings) bytes += linear_bytes(weights.lm_head());
  for (const LayerWeights& layer : weights.layers()) {
    scored::ForEachLinear(layer, [&](const LinearWeight& w, LinearRole) {
      bytes += linear_bytes(w) + w.out_features * 4;  // + an fp32 bias or per-channel scale at most
    });
    bytes += 4 * config.hidden_size * 4 + 2 * config.head_dim * 4;  // norms (Gemma: four per layer)
  }
  return bytes / std::max(tp_size, 1) + config.hidden_size * 4;
}

}  // namespace scored::cuda

// ModelWeights' summary (the startup log's parameters, bits per weight, format label and notes) and the
// format an engine reports.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/model/gguf.h"
#include "engine/model/weights.h"
#include "engine/model/weights_loader.h"

namespace scored {
namespace {

std::string FormatLabel(const LinearWeight& w) {
  // The activation part of a label: "a16-", "afp8-" (dynamic per token), "a8-" (int8 per token).
  auto acts = [&]() -> std::string {
    if (w.w8a8_dynamic_fp8) return "afp8-";
    if (w.w8a8_dynamic_int8) return w.act_symmetric ? "a8-" : "a8-asym-";
    return "a16-";
  };
  auto strategy = [&]() -> std::string {
    switch (w.strategy) {
      case QuantStrategy::kTensor:
        return "tensor";
      case QuantStrategy::kChannel:
        return "channel";
      case QuantStrategy::kGroup:
        return absl::StrCat("g", w.group_size);
      case QuantStrategy::kBlock:
        return absl::StrCat("block", w.block_rows, "x", w.block_cols);
    }
    return "?";
  };
  switch (w.format) {
    case WeightFormat::kDense: {
      std::string d = DTypeName(w.weight.dtype);
      for (char& c : d) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return absl::StrCat("dense-", d);
    }
    case WeightFormat::kPackQuantized:
      return absl::StrCat("w", w.num_bits, acts(), strategy(), w.symmetric ? "-sym" : "-asym",
                          w.actorder_group ? "-actorder" : "");
    case WeightFormat::kNaiveQuantized:
      if (w.num_bits != 8) return absl::StrCat("int-w", w.num_bits, acts(), strategy());
      return absl::StrCat(w.w8a8_dynamic_int8 || w.static_input_int8 ? "int8-w8a8-" : "int8-w8a16-",
                          strategy(), w.symmetric ? "-sym" : "-asym",
                          (w.w8a8_dynamic_int8 || w.static_input_int8) && !w.act_symmetric ? "-act-asym" : "",
                          w.static_input_int8 ? "-act-static" : "");
    case WeightFormat::kNvfp4PackQuantized:
      return "nvfp4a16";
    case WeightFormat::kMxfp4PackQuantized:
      return "mxfp4a16";
    case WeightFormat::kGgmlBlocks: {
      std::string t = GgufTypeName(w.ggml_type);
      for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return absl::StrCat("gguf-", t);
    }
    case WeightFormat::kFloatQuantized:
      return absl::StrCat(w.w8a8_dynamic_fp8 || w.static_input_fp8 ? "fp8-w8a8-" : "fp8-w8a16-", strategy(),
                          w.act_group_size > 0 ? absl::StrCat("-act-g", w.act_group_size) : "",
                          w.static_input_fp8 ? "-act-static" : "");
  }
  return "?";
}

}  // namespace

void ModelWeightsLoader::Summarize() {
  const ModelConfig& c = m_->config_;
  ModelSummary& s = m_->summary_;
  int64_t decoder_bytes = 0, norm_params = 0, bias_params = 0, resident = 0;
  std::map<std::string, int> labels;  // decoder linear format label -> count
  bool w4a4 = false;
  int64_t gate_params = 0;  // routers and shared-expert gates
  for (const LayerWeights& L : m_->layers_) {
    ForEachLinear(L, [&](const LinearWeight& w, LinearRole role) {
      if (IsGateRole(role)) {
        gate_params += w.NumElements();
        resident += w.StoredBytes();
        return;
      }
      s.decoder_linear_params += w.NumElements();
      decoder_bytes += w.StoredBytes();
      bias_params += w.bias.NumElements() * (w.bias.present() ? 1 : 0);
      resident += w.StoredBytes() + w.bias.nbytes;
      labels[FormatLabel(w)]++;
      w4a4 = w4a4 || w.w4a4_run_weight_only;
    });
    // (and a Gated DeltaNet layer's conv1d, A_log, dt_bias and output norm, and a latent attention layer's
    // q_a / kv_a norms, counted with the norms)
    for (const TensorView* t :
         {&L.input_layernorm, &L.post_attention_layernorm, &L.q_norm, &L.k_norm, &L.pre_feedforward_layernorm,
          &L.post_feedforward_layernorm, &L.delta_net.conv1d, &L.delta_net.a_log, &L.delta_net.dt_bias,
          &L.delta_net.norm, &L.moe.correction_bias, &L.latent.q_a_layernorm, &L.latent.kv_a_layernorm}) {
      if (!t->present()) continue;
      norm_params += t->NumElements();
      resident += t->nbytes;
    }
  }
  norm_params += m_->final_norm_.NumElements();
  resident += m_->final_norm_.nbytes + m_->embed_tokens_.nbytes;
  const LinearWeight& head = m_->lm_head_;
  if (!c.tie_word_embeddings) resident += head.StoredBytes();
  s.num_parameters = m_->embed_tokens_.NumElements() + norm_params + bias_params + s.decoder_linear_params +
                     gate_params + (c.tie_word_embeddings ? 0 : head.NumElements());
  s.bits_per_weight_decoder =
      s.decoder_linear_params > 0 ? 8.0 * static_cast<double>(decoder_bytes) / s.decoder_linear_params : 0.0;
  s.bits_per_weight_head =
      head.NumElements() > 0 ? 8.0 * static_cast<double>(head.StoredBytes()) / head.NumElements() : 0.0;
  s.resident_bytes = resident;
  std::vector<std::string> names;
  for (const auto& [label, count] : labels) names.push_back(label);
  s.format = names.size() == 1 ? names[0] : absl::StrCat("mixed(", absl::StrJoin(names, ","), ")");
  std::vector<std::string> notes;
  if (w4a4) notes.push_back("W4A4 checkpoint run weight-only (NVFP4A16): input_global_scale ignored");
  int rotated = 0, sparse_layers = 0, fused_layers = 0;
  for (const LayerWeights& L : m_->layers_) {
    ForEachLinear(L, [&rotated](const LinearWeight& w, LinearRole role) {
      rotated += IsGateRole(role) || w.transforms.empty() ? 0 : 1;
    });
    sparse_layers += L.sparse ? 1 : 0;
    fused_layers += L.moe.fused ? 1 : 0;
  }
  if (c.moe()) {
    const bool shared = c.shared_expert_intermediate_size > 0, gated = shared && c.shared_expert_gated;
    const std::string router =
        c.sigmoid_router
            ? absl::StrCat(
                  ", sigmoid router with e_score_correction_bias",
                  c.router_num_groups > 1
                      ? absl::StrCat(", ", c.router_topk_groups, " of ", c.router_num_groups, " groups")
                      : "",
                  c.routed_scaling_factor != 1.0f ? absl::StrCat(", x ", c.routed_scaling_factor) : "")
            : "";
    notes.push_back(absl::StrCat(
        "mixture-of-experts: ", sparse_layers, " of ", c.num_layers, " layers sparse, ", c.num_experts,
        " experts (top ", c.num_experts_per_tok, c.norm_topk_prob ? ", renormalized" : "", router, ")",
        gated    ? " + a gated shared expert"
        : shared ? absl::StrCat(" + ungated shared experts of ", c.shared_expert_intermediate_size)
                 : "",
        fused_layers > 0 ? absl::StrCat(", ", fused_layers, " layers with fused expert tensors") : "",
        "; routers", gated ? " and shared-expert gates" : "", " ", gate_params, " parameters, dense"));
  }
  if (c.latent_attention) {
    notes.push_back(absl::StrCat(
        "multi-head latent attention: ",
        c.q_lora_rank > 0 ? absl::StrCat("q_lora_rank ", c.q_lora_rank) : std::string("no q_lora_rank"),
        ", kv_lora_rank ", c.kv_lora_rank, ", heads of ", c.qk_nope_head_dim, " + ", c.qk_rope_head_dim,
        " (rope", c.rope_interleave ? ", interleaved" : "", ") / v ", c.v_head_dim, ", score scale ",
        c.attention_scale));
  }
  if (rotated > 0) {
    notes.push_back(
        absl::StrCat("transform_config: online Hadamard rotations on ", rotated, " decoder linears"));
  }
  if (m_->kv_cache_fp8_) {
    notes.push_back(
        absl::StrCat(toolkit_.has_value() ? "ModelOpt kv_cache_quant_algo FP8" : "kv_cache_scheme FP8",
                     ": K (after RoPE) and V quantize-dequantized with per-layer k_scale / v_scale",
                     kv_scales_defaulted_ > 0
                         ? absl::StrCat(" (", kv_scales_defaulted_, " not stored: 1.0, ModelOpt's default)")
                         : ""));
  }
  if (sparse24_linears_ > 0) {
    notes.push_back(absl::StrCat("2:4 sparse (sparse-24-bitmask): ", sparse24_linears_,
                                 " linears decompressed at load, dense GEMMs"));
  }
  if (names.size() > 1) {
    std::vector<std::string> parts;
    for (const auto& [label, count] : labels) parts.push_back(absl::StrCat(label, " x", count));
    notes.push_back(absl::StrCat("decoder linears: ", absl::StrJoin(parts, ", ")));
  }
  if (toolkit_.has_value()) {
    notes.push_back(absl::StrCat(toolkit_->label, " checkpoint, decoded at load to the format above"));
  }
  if (quant_.has_value() || toolkit_.has_value()) {
    notes.push_back(absl::StrCat("lm_head ", FormatLabel(head), c.tie_word_embeddings ? " (tied)" : ""));
  }
  int64_t ignored = 0;
  if (c.family != nullptr) {
    for (const std::string& name : m_->store_->Names()) ignored += IgnoredTower(name) ? 1 : 0;
  }
  if (c.family != nullptr && c.family->text_only.enabled) {
    notes.push_back(absl::StrCat("text only: ", c.architecture,
                                 "'s language model is scored; the vision tower (", ignored,
                                 " tensors) is not loaded"));
  } else if (ignored > 0) {  // the multi-token-prediction layers (Qwen3.5's mtp.*, GLM-4.5's last layer)
    std::vector<std::string> prefixes;
    for (const char* const* p = c.family->text_only.ignored_prefixes; *p != nullptr; ++p)
      prefixes.push_back(absl::StrCat(*p, "*"));
    if (c.family->text_only.layers_past_the_last) {
      prefixes.push_back(absl::StrCat(names_->layer_prefix, "<", c.num_layers, " and above>.*"));
    }
    notes.push_back(absl::StrCat(ignored, " tensors not part of the scored forward (multi-token prediction: ",
                                 absl::StrJoin(prefixes, ", "), ") are not loaded"));
  }
  if (c.index_topk > 0) {  // DeepSeek Sparse Attention (family.h LatentAttentionTraits::indexer)
    int64_t indexer = 0;
    for (const std::string& name : m_->store_->Names()) indexer += IgnoredIndexer(name) ? 1 : 0;
    notes.push_back(
        absl::StrCat("sparse attention: the indexer (", indexer,
                     " tensors) is not loaded; windows of up to index_topk + 1 = ", c.index_topk + 1,
                     " ids, where it keeps every key, are computed as the dense attention they are"));
  }
  s.notes = absl::StrJoin(notes, "; ");
}

std::string ModelWeights::EngineFormat(bool kv_cache_quant) const {
  if (!kv_cache_fp8_) return summary_.format;
  return absl::StrCat(summary_.format, kv_cache_quant ? "+kv-fp8" : "+kv-fp8-ignored");
}

std::string ModelSummary::ToString() const {
  std::ostringstream o;
  o << "format: " << format << "\n";
  o << "parameters: " << num_parameters << " (decoder linears " << decoder_linear_params << ")\n";
  o << absl::StrFormat("bits per weight: decoder %.3f, lm_head %.3f\n", bits_per_weight_decoder,
                       bits_per_weight_head);
  o << absl::StrFormat("resident bytes: %d (%.1f MiB)\n", resident_bytes,
                       static_cast<double>(resident_bytes) / (1024.0 * 1024.0));
  if (!notes.empty()) o << "notes: " << notes << "\n";
  return o.str();
}

}  // namespace scored

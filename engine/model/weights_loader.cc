#include "engine/model/weights_loader.h"

#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "engine/base/status_macros.h"
#include "engine/model/gpt_oss_experts.h"
#include "engine/model/gpt_oss_mxfp4.h"
#include "engine/model/raw_read.h"
#include "engine/model/shard_plan.h"
#include "engine/model/sparse24.h"
#include "engine/model/tensor_checks.h"

namespace scored {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The GPTQ / AWQ / ModelOpt config (toolkit_quant.h): config.json's quantization_config when it names one
// of those methods, else ModelOpt's hf_quant_config.json when config.json has no quantization_config;
// nullopt otherwise (compressed-tensors or dense).
absl::StatusOr<std::optional<ToolkitQuantConfig>> LoadToolkitQuantConfig(const ModelConfig& c,
                                                                         const std::string& model_dir) {
  if (c.has_quantization_config) {
    if (!IsToolkitQuantMethod(c.quantization_config_json)) return std::optional<ToolkitQuantConfig>();
    SCORED_ASSIGN_OR_RETURN(ToolkitQuantConfig t,
                            ParseToolkitQuantConfig(c.quantization_config_json, model_dir + "/config.json"));
    return std::optional<ToolkitQuantConfig>(std::move(t));
  }
  const std::string path = model_dir + "/hf_quant_config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::optional<ToolkitQuantConfig>();
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  SCORED_ASSIGN_OR_RETURN(ToolkitQuantConfig t, ParseToolkitQuantConfig(ss.str(), path));
  return std::optional<ToolkitQuantConfig>(std::move(t));
}

// Tensor suffixes that mark a module as stored quantized (compressed-tensors, GPTQ / AWQ, ModelOpt).
constexpr const char* kQuantizedSuffixes[] = {
    ".weight_packed", ".weight_scale", ".weight_zero_point", ".weight_global_scale", ".weight_shape",
    ".weight_g_idx",  ".input_scale",  ".input_zero_point",  ".input_global_scale",  ".qweight",
    ".qzeros",        ".scales",       ".weight_scale_2",    ".weight_scale_inv",
};

}  // namespace

absl::StatusOr<TensorView> ModelWeightsLoader::TakeWeight(const std::string& module, int64_t out, int64_t in,
                                                          std::initializer_list<DType> dtypes) {
  // As compressed-tensors' decompression: driven by the tensors present, not by the targets (its
  // compressor only ever rewrote a module's `weight`, after quantization).
  const bool sparse =
      quant_.has_value() && quant_->sparsity.sparse24 && m_->store_->Has(module + ".compressed");
  if (!sparse) return TakeChecked(module + ".weight", {out, in}, dtypes);
  SCORED_ASSIGN_OR_RETURN(TensorView shape, Take(module + ".shape"));
  SCORED_ASSIGN_OR_RETURN(TensorView compressed, Take(module + ".compressed"));
  SCORED_ASSIGN_OR_RETURN(TensorView bitmask, Take(module + ".bitmask"));
  bool ok = false;
  for (DType d : dtypes) ok = ok || compressed.dtype == d;
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(compressed.file, ": tensor '", compressed.name,
                                                   "' has dtype ", DTypeName(compressed.dtype),
                                                   ", not the dtype of this module's weight format"));
  }
  SCORED_ASSIGN_OR_RETURN(std::vector<uint8_t> dense,
                          DecompressSparse24(shape, compressed, bitmask, out, in));
  m_->decompressed_.push_back(std::move(dense));
  const std::vector<uint8_t>& bytes = m_->decompressed_.back();
  TensorView t;
  t.name = module + ".weight";
  t.dtype = compressed.dtype;
  t.shape = {out, in};
  t.data = bytes.data();
  t.nbytes = static_cast<int64_t>(bytes.size());
  t.file = compressed.file + " (sparse-24-bitmask, decompressed at load)";
  ++sparse24_linears_;
  return t;
}

absl::StatusOr<TensorView> ModelWeightsLoader::Take(const std::string& name) {
  SCORED_ASSIGN_OR_RETURN(TensorView t, m_->store_->Get(name));
  consumed_.insert(name);
  return t;
}

absl::Status ModelWeightsLoader::CheckShape(const TensorView& t, const std::vector<int64_t>& shape) const {
  if (t.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(t.file, ": tensor '", t.name, "' has shape ",
                                                   ShapeString(t.shape), ", expected ", ShapeString(shape)));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorView> ModelWeightsLoader::TakeChecked(const std::string& name,
                                                           const std::vector<int64_t>& shape,
                                                           std::initializer_list<DType> dtypes) {
  SCORED_ASSIGN_OR_RETURN(TensorView t, Take(name));
  SCORED_RETURN_IF_ERROR(CheckDType(t, dtypes));
  SCORED_RETURN_IF_ERROR(CheckShape(t, shape));
  return t;
}

absl::Status ModelWeightsLoader::LoadScale(LinearWeight* w, const std::string& module) {
  SCORED_ASSIGN_OR_RETURN(w->weight_scale, Take(module + ".weight_scale"));
  const TensorView& s = w->weight_scale;
  if (!IsFloatDType(s.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(s.file, ": tensor '", s.name, "' has dtype ",
                                                   DTypeName(s.dtype), ", expected F32, F16 or BF16"));
  }
  switch (w->strategy) {
    case QuantStrategy::kTensor:
      if (!IsScalarShape(s.shape)) return CheckShape(s, {1});
      return absl::OkStatus();
    case QuantStrategy::kChannel:
      return CheckShape(s, {w->out_features, 1});
    case QuantStrategy::kGroup:
      return CheckShape(s, {w->out_features, CeilDiv(w->in_features, w->group_size)});
    case QuantStrategy::kBlock:
      return CheckShape(s, {CeilDiv(w->out_features, w->block_rows), CeilDiv(w->in_features, w->block_cols)});
  }
  return absl::OkStatus();
}

absl::Status ModelWeightsLoader::LoadInputScale(LinearWeight* w, const std::string& module) {
  SCORED_ASSIGN_OR_RETURN(w->input_scale, Take(module + ".input_scale"));
  SCORED_RETURN_IF_ERROR(CheckPerTensorScale(w->input_scale));
  if (w->static_input_int8 && !w->act_symmetric) {
    SCORED_ASSIGN_OR_RETURN(w->input_zero_point, Take(module + ".input_zero_point"));
    if (w->input_zero_point.dtype != DType::kI8 || !IsScalarShape(w->input_zero_point.shape)) {
      return absl::InvalidArgumentError(
          absl::StrCat(w->input_zero_point.file, ": tensor '", w->input_zero_point.name, "' must be I8 [1]"));
    }
  }
  return absl::OkStatus();
}

absl::Status ModelWeightsLoader::LoadTransforms(const std::string& module, LinearWeight* w) {
  if (!quant_.has_value() || quant_->transforms.empty()) return absl::OkStatus();
  SCORED_ASSIGN_OR_RETURN(std::vector<OnlineTransform> online, ResolveTransforms(quant_->transforms, module));
  for (const OnlineTransform& t : online) {
    const bool output = t.location == "output";
    const int64_t width = output ? w->out_features : w->in_features;
    const int64_t n = t.head_dim > 0 ? t.head_dim : width;
    if (width % n != 0) {
      return absl::InvalidArgumentError(absl::StrCat(module, ": transform '", t.scheme, "' of size ", n,
                                                     " does not divide the ", t.location, " width ", width));
    }
    // The scheme's matrices are saved once per size, under the first module that uses each (tied weights).
    const std::string suffix = t.TensorSuffix();
    std::string found;
    for (const std::string& name : m_->store_->Names()) {
      if (!absl::EndsWith(name, suffix)) continue;
      SCORED_ASSIGN_OR_RETURN(TensorView candidate, m_->store_->Get(name));
      if (candidate.shape == std::vector<int64_t>{n, n}) {
        if (!found.empty()) {
          return absl::InvalidArgumentError(absl::StrCat(module, ": transform '", t.scheme,
                                                         "' has two stored ", n, "x", n, " matrices, ", found,
                                                         " and ", name));
        }
        found = name;
      }
    }
    if (found.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(module, ": transform_config '", t.scheme, "' (",
                                                     t.location, ") needs a stored ", n, "x", n, " matrix '*",
                                                     suffix, "', none in the checkpoint"));
    }
    SCORED_ASSIGN_OR_RETURN(TensorView matrix, TakeChecked(found, {n, n}, {DType::kF64, DType::kF32}));
    w->transforms.push_back(LinearTransform{output, t.inverse, matrix});
  }
  return absl::OkStatus();
}

absl::Status ModelWeightsLoader::LoadKvScale(const std::string& name, TensorView* scale) {
  SCORED_ASSIGN_OR_RETURN(*scale, Take(name));
  return CheckPerTensorScale(*scale);
}

absl::Status ModelWeightsLoader::CheckPerTensorScale(const TensorView& s) const {
  if (!IsFloatDType(s.dtype) || !IsScalarShape(s.shape)) {
    return absl::InvalidArgumentError(absl::StrCat(s.file, ": tensor '", s.name, "' has dtype ",
                                                   DTypeName(s.dtype), " and shape ", ShapeString(s.shape),
                                                   ", expected F32, F16 or BF16 [1] (a per-tensor scale)"));
  }
  // The scale divides every input element: a zero, negative or non-finite one cannot have come from
  // calibration.
  float scale = 0.0f;
  SCORED_RETURN_IF_ERROR(TensorToFloat(s, &scale, 1));
  if (!(scale > 0.0f) || !std::isfinite(scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.file, ": tensor '", s.name, "' is ", scale, ", expected a finite scale > 0"));
  }
  return absl::OkStatus();
}

absl::Status ModelWeightsLoader::LoadLinear(const std::string& module, int64_t out, int64_t in, bool bias,
                                            LinearWeight* w) {
  w->module = module;
  w->out_features = out;
  w->in_features = in;
  ModuleScheme scheme;
  if (quant_.has_value()) {
    SCORED_ASSIGN_OR_RETURN(scheme, ResolveModuleScheme(*quant_, module));
  }
  w->format = scheme.format;
  SCORED_RETURN_IF_ERROR(LoadTransforms(module, w));
  if (bias) {
    SCORED_ASSIGN_OR_RETURN(w->bias,
                            TakeChecked(module + ".bias", {out}, {DType::kF32, DType::kF16, DType::kBF16}));
  }
  if (toolkit_.has_value() && ToolkitModuleQuantized(*toolkit_, *m_->store_, module)) {
    std::vector<std::string> used;
    SCORED_RETURN_IF_ERROR(LoadToolkitLinear(*toolkit_, *m_->store_, w, &used, &m_->transcoded_));
    consumed_.insert(used.begin(), used.end());
    return absl::OkStatus();
  }
  if (!scheme.quantized) {
    w->format = WeightFormat::kDense;
    SCORED_ASSIGN_OR_RETURN(w->weight, TakeWeight(module, out, in, {DType::kF32, DType::kF16, DType::kBF16}));
    return absl::OkStatus();
  }
  w->num_bits = scheme.num_bits;
  w->symmetric = scheme.symmetric;
  w->strategy = scheme.strategy;
  w->group_size = scheme.group_size;
  w->block_rows = scheme.block_rows;
  w->block_cols = scheme.block_cols;
  w->actorder_group = scheme.actorder_group;
  w->w8a8_dynamic_fp8 = scheme.w8a8_dynamic_fp8;
  w->act_group_size = scheme.act_group_size;
  w->w8a8_dynamic_int8 = scheme.w8a8_dynamic_int8;
  w->static_input_fp8 = scheme.static_input_fp8;
  w->static_input_int8 = scheme.static_input_int8;
  w->act_symmetric = scheme.act_symmetric;
  w->w4a4_run_weight_only = scheme.w4a4_run_weight_only;
  const std::string where = absl::StrCat(module, " (", scheme.format_name, ", group '", scheme.group, "')");

  switch (scheme.format) {
    case WeightFormat::kDense:
      break;
    case WeightFormat::kGgmlBlocks:  // GGUF files have no compressed-tensors schemes
      return absl::InternalError(absl::StrCat(where, ": a GGUF block format in a compressed-tensors scheme"));
    case WeightFormat::kPackQuantized: {
      const int b = w->num_bits;
      SCORED_ASSIGN_OR_RETURN(w->weight_packed, TakeChecked(module + ".weight_packed",
                                                            {out, CeilDiv(in * b, 32)}, {DType::kI32}));
      SCORED_ASSIGN_OR_RETURN(TensorView shape, TakeChecked(module + ".weight_shape", {2}, {DType::kI64}));
      const int64_t s0 = raw_read::Load<int64_t>(shape.data, 0), s1 = raw_read::Load<int64_t>(shape.data, 1);
      if (s0 != out || s1 != in) {
        return absl::InvalidArgumentError(absl::StrCat(shape.file, ": tensor '", shape.name, "' holds [", s0,
                                                       ", ", s1, "], expected [", out, ", ", in, "]"));
      }
      if (w->strategy == QuantStrategy::kGroup && !w->actorder_group && in % w->group_size != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": in_features ", in, " is not a multiple of group_size ", w->group_size));
      }
      SCORED_RETURN_IF_ERROR(LoadScale(w, module));
      const int64_t groups = w->weight_scale.shape.size() == 2 ? w->weight_scale.shape[1] : 1;
      if (!w->symmetric) {
        SCORED_ASSIGN_OR_RETURN(
            w->weight_zero_point,
            TakeChecked(module + ".weight_zero_point", {CeilDiv(out * b, 32), groups}, {DType::kI32}));
      }
      if (w->actorder_group) {
        SCORED_ASSIGN_OR_RETURN(w->weight_g_idx, TakeChecked(module + ".weight_g_idx", {in}, {DType::kI32}));
        int64_t unset = 0;
        for (int64_t k = 0; k < in; ++k) {
          const int32_t g = raw_read::Load<int32_t>(w->weight_g_idx.data, k);
          if (g == -1) {
            ++unset;
          } else if (g < 0 || g >= groups) {
            return absl::InvalidArgumentError(absl::StrCat(w->weight_g_idx.file, ": tensor '",
                                                           w->weight_g_idx.name, "'[", k, "] = ", g,
                                                           " outside [0, ", groups, ")"));
          }
        }
        if (unset == in) {  // an all -1 g_idx means "no activation ordering" to compressed-tensors
          w->weight_g_idx = TensorView();
          w->actorder_group = false;
        } else if (unset != 0) {
          return absl::InvalidArgumentError(absl::StrCat(module, ".weight_g_idx mixes -1 and group ids"));
        }
      }
      break;
    }
    case WeightFormat::kNaiveQuantized: {
      SCORED_ASSIGN_OR_RETURN(w->weight, TakeWeight(module, out, in, {DType::kI8}));
      if (w->strategy == QuantStrategy::kGroup && in % w->group_size != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": in_features ", in, " is not a multiple of group_size ", w->group_size));
      }
      SCORED_RETURN_IF_ERROR(LoadScale(w, module));
      if (!w->symmetric) {
        SCORED_ASSIGN_OR_RETURN(
            w->weight_zero_point,
            TakeChecked(module + ".weight_zero_point", w->weight_scale.shape, {DType::kI8, DType::kI32}));
        SCORED_RETURN_IF_ERROR(CheckInt8ZeroPoints(w->weight_zero_point));
      }
      break;
    }
    case WeightFormat::kNvfp4PackQuantized: {
      if (in % 16 != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": in_features ", in, " is not a multiple of 16"));
      }
      SCORED_ASSIGN_OR_RETURN(w->weight_packed,
                              TakeChecked(module + ".weight_packed", {out, in / 2}, {DType::kU8}));
      SCORED_ASSIGN_OR_RETURN(w->weight_scale,
                              TakeChecked(module + ".weight_scale", {out, in / 16}, {DType::kF8E4M3}));
      SCORED_ASSIGN_OR_RETURN(w->weight_global_scale, Take(module + ".weight_global_scale"));
      if (w->weight_global_scale.dtype != DType::kF32 || !IsScalarShape(w->weight_global_scale.shape)) {
        return absl::InvalidArgumentError(absl::StrCat(w->weight_global_scale.file, ": tensor '",
                                                       w->weight_global_scale.name, "' must be F32 [1]"));
      }
      if (m_->store_->Has(module + ".input_global_scale")) {
        SCORED_ASSIGN_OR_RETURN(w->input_global_scale, Take(module + ".input_global_scale"));
        w->w4a4_run_weight_only = true;
      }
      break;
    }
    case WeightFormat::kMxfp4PackQuantized: {
      if (in % 32 != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": in_features ", in, " is not a multiple of 32"));
      }
      SCORED_ASSIGN_OR_RETURN(w->weight_packed,
                              TakeChecked(module + ".weight_packed", {out, in / 2}, {DType::kU8}));
      SCORED_ASSIGN_OR_RETURN(w->weight_scale,
                              TakeChecked(module + ".weight_scale", {out, in / 32}, {DType::kU8}));
      break;
    }
    case WeightFormat::kFloatQuantized: {
      SCORED_ASSIGN_OR_RETURN(w->weight, TakeWeight(module, out, in, {DType::kF8E4M3}));
      SCORED_RETURN_IF_ERROR(LoadScale(w, module));
      break;
    }
  }
  if (w->static_input_fp8 || w->static_input_int8) SCORED_RETURN_IF_ERROR(LoadInputScale(w, module));
  return absl::OkStatus();
}

// Every quantization parameter (scales, nvfp4 global scales, which are divisors and so must not be 0 either),
// norm weight and bias is checked: they are small (a scale per group of 16..128 weights at most), so the
// pass costs little. Dense and quantized weight values are not: that would be a pass over every byte of
// the checkpoint (16 GB for an 8B bf16 model); a NaN there shows as a non-finite log-probability, which
// the server turns into a per-request error.
absl::Status ModelWeightsLoader::CheckFiniteParameters() const {
  auto check_linear = [](const LinearWeight& w) -> absl::Status {
    SCORED_RETURN_IF_ERROR(CheckFinite(w.weight_scale, "a quantization scale"));
    SCORED_RETURN_IF_ERROR(CheckFinite(w.weight_global_scale, "a global scale"));
    SCORED_RETURN_IF_ERROR(CheckE8M0Scales(w));
    if (w.weight_global_scale.present() && raw_read::Load<float>(w.weight_global_scale.data, 0) == 0.0f) {
      return absl::InvalidArgumentError(absl::StrCat(w.weight_global_scale.file, ": tensor '",
                                                     w.weight_global_scale.name,
                                                     "' is 0: a global scale divides the block scales"));
    }
    return CheckFinite(w.bias, "a bias");
  };
  SCORED_RETURN_IF_ERROR(CheckFinite(m_->final_norm_, "a norm weight"));
  for (const LayerWeights& L : m_->layers_) {
    for (const TensorView* t :
         {&L.input_layernorm, &L.post_attention_layernorm, &L.q_norm, &L.k_norm, &L.pre_feedforward_layernorm,
          &L.post_feedforward_layernorm, &L.latent.q_a_layernorm, &L.latent.kv_a_layernorm}) {
      SCORED_RETURN_IF_ERROR(CheckFinite(*t, "a norm weight"));
    }
    SCORED_RETURN_IF_ERROR(CheckFinite(L.moe.correction_bias, "a router correction bias"));
    SCORED_RETURN_IF_ERROR(CheckFinite(L.sinks, "an attention sink logit"));
    SCORED_RETURN_IF_ERROR(CheckFinite(L.layer_scalar, "a layer scalar"));
    for (const TensorView* t : {&L.experts_pre_norm, &L.dense_post_norm, &L.experts_post_norm,
                                &L.moe.router_scale, &L.moe.per_expert_scale}) {
      SCORED_RETURN_IF_ERROR(CheckFinite(*t, "a norm weight or router scale"));
    }
    absl::Status status;
    ForEachLinear(L, [&](const LinearWeight& w, LinearRole) {
      if (status.ok()) status = check_linear(w);
    });
    SCORED_RETURN_IF_ERROR(status);
  }
  return check_linear(m_->lm_head_);
}

absl::Status ModelWeightsLoader::LoadRouter(const std::string& module, bool bias, LinearWeight* w) {
  const ModelConfig& c = m_->config_;
  // The routing is defined on fp32 logits of the stored weights (config.h): a router stored quantized,
  // which no MoE recipe makes, is refused rather than decoded and multiplied as if it were dense.
  for (const char* suffix : kQuantizedSuffixes) {
    if (!m_->store_->Has(module + suffix)) continue;
    SCORED_ASSIGN_OR_RETURN(TensorView t, m_->store_->Get(module + suffix));
    return absl::InvalidArgumentError(absl::StrCat(
        t.file, ": the router '", module, "' is stored quantized (tensor '", t.name,
        "'): quantized routers are not supported; the router must stay dense (llm-compressor's MoE "
        "recipes list it in quantization_config.ignore)"));
  }
  if (m_->store_->Has(module + ".weight")) {
    SCORED_ASSIGN_OR_RETURN(TensorView t, m_->store_->Get(module + ".weight"));
    if (!IsFloatDType(t.dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat(t.file, ": the router weight '", t.name, "' has dtype ", DTypeName(t.dtype),
                       ": quantized routers are not supported; the router must stay dense (F32, F16 or BF16; "
                       "llm-compressor's MoE recipes list it in quantization_config.ignore)"));
    }
  }
  w->module = module;
  w->out_features = c.num_experts;
  w->in_features = c.hidden_size;
  w->format = WeightFormat::kDense;
  SCORED_ASSIGN_OR_RETURN(w->weight, TakeChecked(module + ".weight", {c.num_experts, c.hidden_size},
                                                 {DType::kF32, DType::kF16, DType::kBF16}));
  if (bias) {
    SCORED_ASSIGN_OR_RETURN(
        w->bias, TakeChecked(module + ".bias", {c.num_experts}, {DType::kF32, DType::kF16, DType::kBF16}));
  }
  return absl::OkStatus();
}

absl::Status ModelWeightsLoader::LoadGptOssExperts(const std::string& experts, MoeWeights* moe) {
  const ModelConfig& c = m_->config_;
  const int64_t num = c.num_experts, inter = c.moe_intermediate_size, h = c.hidden_size;
  const std::string first = experts + ".0.gate_proj";
  if (m_->store_->Has(first + ".weight") || m_->store_->Has(first + ".weight_packed")) {  // one module each
    moe->experts.resize(static_cast<size_t>(num));
    for (int64_t e = 0; e < num; ++e) {
      SCORED_RETURN_IF_ERROR(LoadSwiGlu(absl::StrCat(experts, ".", e, "."), "gate_proj", "up_proj",
                                        "down_proj", inter, &moe->experts[static_cast<size_t>(e)],
                                        /*bias=*/true));
    }
    return absl::OkStatus();
  }
  if (gpt_oss_mxfp4_) {
    SCORED_ASSIGN_OR_RETURN(GptOssMxfp4Tensors t, GetGptOssMxfp4Tensors(*m_->store_, experts));
    SCORED_ASSIGN_OR_RETURN(moe->experts, SplitGptOssMxfp4Experts(t, num, inter, h, &m_->transcoded_));
    for (const TensorView* v : {&t.gate_up_blocks, &t.gate_up_scales, &t.down_blocks, &t.down_scales}) {
      consumed_.insert(v->name);
    }
  } else {
    if (m_->store_->Has(experts + ".gate_up_proj_blocks")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the checkpoint stores MXFP4 expert blocks ('", experts,
          ".gate_up_proj_blocks') but config.json has no quantization_config with quant_method \"mxfp4\""));
    }
    SCORED_ASSIGN_OR_RETURN(TensorView gate_up, Take(experts + ".gate_up_proj"));
    SCORED_ASSIGN_OR_RETURN(TensorView down, Take(experts + ".down_proj"));
    SCORED_ASSIGN_OR_RETURN(moe->experts,
                            SplitGptOssDenseExperts(experts, gate_up, down, num, inter, h, &m_->transcoded_));
    moe->fused = true;
  }
  SCORED_ASSIGN_OR_RETURN(TensorView gate_up_bias, Take(experts + ".gate_up_proj_bias"));
  SCORED_ASSIGN_OR_RETURN(TensorView down_bias, Take(experts + ".down_proj_bias"));
  return SetGptOssExpertBiases(gate_up_bias, down_bias, inter, h, &moe->experts, &m_->transcoded_);
}

absl::Status ModelWeightsLoader::LoadSwiGlu(const std::string& prefix, const char* gate, const char* up,
                                            const char* down, int64_t intermediate, ExpertWeights* e,
                                            bool bias) {
  const int64_t h = m_->config_.hidden_size;
  SCORED_RETURN_IF_ERROR(LoadLinear(prefix + gate, intermediate, h, bias, &e->gate_proj));
  SCORED_RETURN_IF_ERROR(LoadLinear(prefix + up, intermediate, h, bias, &e->up_proj));
  return LoadLinear(prefix + down, h, intermediate, bias, &e->down_proj);
}

absl::Status ModelWeightsLoader::LoadFusedExperts(const std::string& experts, MoeWeights* moe) {
  const ModelConfig& c = m_->config_;
  const MoeTensorNames& n = c.family->moe.names;
  const int64_t num = c.num_experts, inter = c.moe_intermediate_size, h = c.hidden_size;
  const std::initializer_list<DType> kFloat = {DType::kF32, DType::kF16, DType::kBF16};
  SCORED_ASSIGN_OR_RETURN(TensorView gate_up,
                          TakeChecked(experts + n.fused_gate_up, {num, 2 * inter, h}, kFloat));
  SCORED_ASSIGN_OR_RETURN(TensorView down, TakeChecked(experts + n.fused_down, {num, h, inter}, kFloat));
  const int64_t elem = DTypeSize(gate_up.dtype);
  if (DTypeSize(down.dtype) != elem || down.dtype != gate_up.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(down.file, ": fused expert tensors '", gate_up.name, "' (",
                                                   DTypeName(gate_up.dtype), ") and '", down.name, "' (",
                                                   DTypeName(down.dtype), ") differ in dtype"));
  }
  // A kDense view of `rows` x `cols` elements of `t` starting at element `first`.
  auto view = [&](const TensorView& t, int64_t first, int64_t rows, int64_t cols, const std::string& what,
                  LinearWeight* w) {
    w->module = absl::StrCat(t.name, what);
    w->out_features = rows;
    w->in_features = cols;
    w->format = WeightFormat::kDense;
    w->weight.name = w->module;
    w->weight.dtype = t.dtype;
    w->weight.shape = {rows, cols};
    w->weight.data = t.data + first * elem;
    w->weight.nbytes = rows * cols * elem;
    w->weight.file = t.file;
  };
  moe->fused = true;
  moe->experts.resize(static_cast<size_t>(num));
  for (int64_t e = 0; e < num; ++e) {
    ExpertWeights& x = moe->experts[static_cast<size_t>(e)];
    view(gate_up, e * 2 * inter * h, inter, h, absl::StrCat("[", e, "][0:", inter, "]"), &x.gate_proj);
    view(gate_up, (e * 2 + 1) * inter * h, inter, h, absl::StrCat("[", e, "][", inter, ":", 2 * inter, "]"),
         &x.up_proj);
    view(down, e * h * inter, h, inter, absl::StrCat("[", e, "]"), &x.down_proj);
  }
  return absl::OkStatus();
}

absl::Status ModelWeightsLoader::LoadFused(const std::string& module, int64_t in,
                                           std::initializer_list<FusedPart> parts) {
  int64_t total = 0;
  for (const FusedPart& p : parts) total += p.rows;
  LinearWeight fused;
  SCORED_RETURN_IF_ERROR(LoadLinear(module, total, in, /*bias=*/false, &fused));
  for (const LinearTransform& t : fused.transforms) {
    if (t.output) {
      return absl::UnimplementedError(
          absl::StrCat(module, ": an online output rotation on a fused module is not supported"));
    }
  }
  int64_t begin = 0;
  for (const FusedPart& p : parts) {
    const LinearSlice slice{ShardKind::kColumnParallel, begin, begin + p.rows};
    SCORED_ASSIGN_OR_RETURN(ShardedLinear part, ShardLinear(fused, slice, /*tp_rank=*/0));
    // Re-packed tensors: move their buffers (the views point into them; a moved vector keeps its buffer).
    for (std::vector<uint8_t>& owned : part.owned) {
      m_->transcoded_.push_back(std::make_unique<std::vector<uint8_t>>(std::move(owned)));
    }
    *p.out = std::move(part.view);
    p.out->module = absl::StrCat(module, "[", p.name, "]");
    begin += p.rows;
  }
  return absl::OkStatus();
}

absl::Status ModelWeightsLoader::LoadMoe(const std::string& prefix, const ExpertsPlan& plan,
                                         MoeWeights* moe) {
  const ModelConfig& c = m_->config_;
  const MoeTensorNames& n = c.family->moe.names;
  SCORED_RETURN_IF_ERROR(LoadRouter(prefix + n.router, plan.router_bias, &moe->router));
  if (c.family->moe.policy == MoePolicy::kGptOss) {
    std::string experts = prefix + n.experts;
    experts.pop_back();  // "mlp.experts." -> the module "mlp.experts"
    return LoadGptOssExperts(experts, moe);
  }
  // The layout, by name: expert 0's gate module in any format's tensors (under the family's names or their
  // alternative), or the fused gate/up tensor.
  const std::string experts = prefix + n.experts;
  auto stored = [&](const char* gate) {
    if (gate == nullptr) return false;
    const std::string module = absl::StrCat(experts, "0.", gate);
    for (const char* suffix : {".weight", ".weight_packed", ".compressed", ".qweight"}) {
      if (m_->store_->Has(module + suffix)) return true;
    }
    return false;
  };
  const bool alt = !stored(n.expert_gate) && stored(n.expert_gate_alt);
  const char* gate = alt ? n.expert_gate_alt : n.expert_gate;
  const char* up = alt ? n.expert_up_alt : n.expert_up;
  const char* down = alt ? n.expert_down_alt : n.expert_down;
  const std::string first = absl::StrCat(experts, "0.", gate);
  const bool per_expert = stored(gate);
  const bool fused = m_->store_->Has(experts + n.fused_gate_up);
  if (per_expert && fused) {
    return absl::InvalidArgumentError(absl::StrCat("the checkpoint stores the experts of '", experts,
                                                   "' both per expert ('", first, "') and fused ('", experts,
                                                   n.fused_gate_up, "')"));
  }
  if (fused) {
    SCORED_RETURN_IF_ERROR(LoadFusedExperts(experts, moe));
  } else if (per_expert) {
    moe->experts.resize(static_cast<size_t>(c.num_experts));
    for (int64_t e = 0; e < c.num_experts; ++e) {
      SCORED_RETURN_IF_ERROR(LoadSwiGlu(absl::StrCat(experts, e, "."), gate, up, down,
                                        c.moe_intermediate_size, &moe->experts[static_cast<size_t>(e)]));
    }
  } else {
    // Name what the checkpoint does hold there, if anything.
    std::string found;
    for (const std::string& name : m_->store_->Names()) {
      if (absl::StartsWith(name, experts)) {
        found = absl::StrCat("; it holds '", name, "'");
        break;
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown expert layout in '", experts, "'", found.empty() ? ": no expert tensors" : found,
        ". Supported: one module per expert ('", first, ".weight' or its quantized tensors, for e = 0..",
        c.num_experts - 1, ") or fused dense tensors '", experts, n.fused_gate_up, "' [", c.num_experts, ", ",
        2 * c.moe_intermediate_size, ", ", c.hidden_size, "] and '", experts, n.fused_down, "' [",
        c.num_experts, ", ", c.hidden_size, ", ", c.moe_intermediate_size, "]"));
  }
  if (plan.shared_expert()) {
    SCORED_RETURN_IF_ERROR(LoadSwiGlu(prefix + n.shared_expert, "gate_proj", "up_proj", "down_proj",
                                      plan.shared_expert_intermediate_size, &moe->shared_expert));
    if (plan.shared_expert_gated) {
      SCORED_RETURN_IF_ERROR(
          LoadLinear(prefix + n.shared_expert_gate, 1, c.hidden_size, false, &moe->shared_expert_gate));
    }
  }
  if (plan.correction_bias) {
    SCORED_ASSIGN_OR_RETURN(moe->correction_bias, LoadCorrectionBias(prefix + n.correction_bias));
  }
  const std::initializer_list<DType> kFloat = {DType::kF32, DType::kF16, DType::kBF16};
  if (plan.router_input_norm) {  // Gemma 4: never quantized
    SCORED_ASSIGN_OR_RETURN(moe->router_scale, TakeChecked(prefix + n.router_scale, {c.hidden_size}, kFloat));
  }
  if (plan.per_expert_scale) {
    SCORED_ASSIGN_OR_RETURN(moe->per_expert_scale,
                            TakeChecked(prefix + n.per_expert_scale, {c.num_experts}, kFloat));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorView> ModelWeightsLoader::LoadCorrectionBias(const std::string& name) {
  // Added to the router's sigmoid scores in fp32 (transformers keeps it in fp32: DeepseekV3PreTrainedModel's
  // _keep_in_fp32_modules_strict): a quantized one is refused rather than decoded.
  for (const char* suffix : {"_scale", "_packed", "_zero_point", "_global_scale", "_scale_inv"}) {
    if (!m_->store_->Has(name + suffix)) continue;
    return absl::InvalidArgumentError(absl::StrCat("the router's correction bias '", name,
                                                   "' is stored quantized (tensor '", name, suffix,
                                                   "'): it must stay dense (F32, F16 or BF16)"));
  }
  SCORED_ASSIGN_OR_RETURN(TensorView t, Take(name));
  if (!IsFloatDType(t.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(t.file, ": the router's correction bias '", t.name,
                                                   "' has dtype ", DTypeName(t.dtype),
                                                   ": it must stay dense (F32, F16 or BF16)"));
  }
  SCORED_RETURN_IF_ERROR(CheckShape(t, {m_->config_.num_experts}));
  return t;
}

bool ModelWeightsLoader::IgnoredTower(const std::string& name) const {
  const TextOnlyTraits& t = m_->config_.family->text_only;
  for (const char* const* p = t.ignored_prefixes; *p != nullptr; ++p) {
    if (absl::StartsWith(name, *p)) return true;
  }
  return t.layers_past_the_last && LayerPastTheLast(name);
}

std::optional<ModelWeightsLoader::LayerTensorName> ModelWeightsLoader::SplitLayerName(
    const std::string& name) const {
  const absl::string_view prefix = names_ != nullptr ? names_->layer_prefix : "";
  if (prefix.empty() || !absl::StartsWith(name, prefix)) return std::nullopt;
  const absl::string_view rest = absl::string_view(name).substr(prefix.size());
  const size_t dot = rest.find('.');
  LayerTensorName out;
  if (dot == absl::string_view::npos || dot == 0 || !absl::SimpleAtoi(rest.substr(0, dot), &out.layer)) {
    return std::nullopt;
  }
  out.within = rest.substr(dot + 1);
  return out;
}

bool ModelWeightsLoader::LayerPastTheLast(const std::string& name) const {
  const std::optional<LayerTensorName> split = SplitLayerName(name);
  return split.has_value() && split->layer >= m_->config_.num_layers;
}

bool ModelWeightsLoader::IgnoredIndexer(const std::string& name) const {
  const char* indexer = m_->config_.family->latent_attention.indexer;
  if (indexer == nullptr) return false;
  const std::optional<LayerTensorName> split = SplitLayerName(name);
  return split.has_value() && absl::StartsWith(split->within, indexer);
}

absl::Status ModelWeightsLoader::CheckLeftovers() const {
  std::vector<std::string> left;
  for (const std::string& name : m_->store_->Names()) {
    if (consumed_.count(name) != 0) continue;
    if (absl::EndsWith(name, ".rotary_emb.inv_freq")) continue;  // a buffer older exports saved
    // A tied checkpoint may still store the (identical) lm_head.
    if (m_->config_.tie_word_embeddings && name == absl::StrCat(names_->lm_head, ".weight")) continue;
    if (IgnoredTower(name) || IgnoredIndexer(name)) continue;
    left.push_back(name);
  }
  if (left.empty()) return absl::OkStatus();
  if (left.size() > 5) left.resize(5);
  return absl::InvalidArgumentError(absl::StrCat(
      "checkpoint holds tensors the model does not use (unsupported feature?): ", absl::StrJoin(left, ", ")));
}

absl::Status ModelWeightsLoader::LoadAttention(const std::string& p, const AttentionPlan& plan,
                                               LayerWeights* out) {
  const ModelConfig& c = m_->config_;
  const TensorNames& n = *names_;
  // Qwen3.5's output gate doubles q_proj: [q_h | gate_h] per head.
  const int64_t q_out = c.num_heads * plan.head_dim * (plan.output_gate ? 2 : 1);
  const int64_t kv_out = plan.num_kv_heads * plan.head_dim;
  LayerWeights& L = *out;
  const bool b = plan.qkv_bias;
  L.k_eq_v = plan.k_eq_v;
  if (n.qkv_proj != nullptr) {  // fused (Phi-3): no family with one has a q/k/v bias
    SCORED_RETURN_IF_ERROR(
        LoadFused(p + n.qkv_proj, c.hidden_size,
                  {{q_out, "q", &L.q_proj}, {kv_out, "k", &L.k_proj}, {kv_out, "v", &L.v_proj}}));
  } else {
    SCORED_RETURN_IF_ERROR(LoadLinear(p + n.q_proj, q_out, c.hidden_size, b, &L.q_proj));
    SCORED_RETURN_IF_ERROR(LoadLinear(p + n.k_proj, kv_out, c.hidden_size, b, &L.k_proj));
    if (!plan.k_eq_v) {
      SCORED_RETURN_IF_ERROR(LoadLinear(p + n.v_proj, kv_out, c.hidden_size, b, &L.v_proj));
    }
  }
  SCORED_RETURN_IF_ERROR(
      LoadLinear(p + n.o_proj, c.hidden_size, c.num_heads * plan.head_dim, plan.o_bias, &L.o_proj));
  if (plan.sinks) {  // never quantized: a learned logit per head
    SCORED_ASSIGN_OR_RETURN(L.sinks, TakeChecked(p + c.family->attention_sinks, {c.num_heads},
                                                 {DType::kF32, DType::kF16, DType::kBF16}));
  }
  return absl::OkStatus();
}

absl::Status ModelWeightsLoader::LoadLatentAttention(const std::string& p, const LatentAttentionPlan& plan,
                                                     LayerWeights* out) {
  const ModelConfig& c = m_->config_;
  const LatentAttentionTraits& t = c.family->latent_attention;
  const TensorNames& n = *names_;
  const std::initializer_list<DType> kFloat = {DType::kF32, DType::kF16, DType::kBF16};
  const int64_t h = c.hidden_size;
  LatentAttentionWeights& a = out->latent;
  if (plan.q_lora_rank > 0) {
    SCORED_RETURN_IF_ERROR(LoadLinear(p + t.q_a_proj, plan.q_lora_rank, h, plan.a_bias, &a.q_a_proj));
    SCORED_ASSIGN_OR_RETURN(a.q_a_layernorm, TakeChecked(p + t.q_a_layernorm, {plan.q_lora_rank}, kFloat));
    SCORED_RETURN_IF_ERROR(LoadLinear(p + t.q_b_proj, plan.q_width(), plan.q_lora_rank, false, &a.q_b_proj));
  } else {
    for (const char* suffix : {".weight", ".weight_packed"}) {
      if (!m_->store_->Has(p + t.q_a_proj + suffix)) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json's q_lora_rank is absent or null (q = q_proj(x)), but the checkpoint stores '", p,
          t.q_a_proj, suffix, "' (the low-rank q of a config with q_lora_rank)"));
    }
    SCORED_RETURN_IF_ERROR(LoadLinear(p + n.q_proj, plan.q_width(), h, false, &out->q_proj));
  }
  SCORED_RETURN_IF_ERROR(LoadLinear(p + t.kv_a_proj, plan.kv_a_width(), h, plan.a_bias, &a.kv_a_proj));
  SCORED_ASSIGN_OR_RETURN(a.kv_a_layernorm, TakeChecked(p + t.kv_a_layernorm, {plan.kv_lora_rank}, kFloat));
  SCORED_RETURN_IF_ERROR(
      LoadLinear(p + t.kv_b_proj, plan.kv_b_width(), plan.kv_lora_rank, false, &a.kv_b_proj));
  return LoadLinear(p + n.o_proj, h, plan.o_width(), plan.o_bias, &out->o_proj);
}

absl::Status ModelWeightsLoader::LoadDeltaNet(const std::string& p, const DeltaNetPlan& plan,
                                              DeltaNetWeights* out) {
  const ModelConfig& c = m_->config_;
  const LinearAttentionTraits& t = c.family->linear_attention;
  const std::initializer_list<DType> kFloat = {DType::kF32, DType::kF16, DType::kBF16};
  const int64_t h = c.hidden_size, conv = plan.conv_dim(), vd = plan.value_dim(), vh = plan.num_v_heads;
  out->fused = t.in_proj_qkvz != nullptr;
  if (out->fused) {  // Qwen3-Next: the rows grouped per k head, reordered by the blocks after the product
    SCORED_RETURN_IF_ERROR(LoadLinear(p + t.in_proj_qkvz, conv + vd, h, false, &out->in_proj_qkvz));
    SCORED_RETURN_IF_ERROR(LoadLinear(p + t.in_proj_ba, 2 * vh, h, false, &out->in_proj_ba));
  } else {
    SCORED_RETURN_IF_ERROR(LoadLinear(p + t.in_proj_qkv, conv, h, false, &out->in_proj_qkv));
    SCORED_RETURN_IF_ERROR(LoadLinear(p + t.in_proj_z, vd, h, false, &out->in_proj_z));
    SCORED_RETURN_IF_ERROR(LoadLinear(p + t.in_proj_b, vh, h, false, &out->in_proj_b));
    SCORED_RETURN_IF_ERROR(LoadLinear(p + t.in_proj_a, vh, h, false, &out->in_proj_a));
  }
  SCORED_RETURN_IF_ERROR(LoadLinear(p + t.out_proj, h, vd, false, &out->out_proj));
  // Never quantized: a stored dtype other than F32 / F16 / BF16 is refused naming the tensor.
  SCORED_ASSIGN_OR_RETURN(out->conv1d, TakeChecked(p + t.conv1d, {conv, 1, plan.conv_kernel}, kFloat));
  SCORED_ASSIGN_OR_RETURN(out->a_log, TakeChecked(p + t.a_log, {vh}, kFloat));
  SCORED_ASSIGN_OR_RETURN(out->dt_bias, TakeChecked(p + t.dt_bias, {vh}, kFloat));
  SCORED_ASSIGN_OR_RETURN(out->norm, TakeChecked(p + t.norm, {plan.v_head_dim}, kFloat));
  return absl::OkStatus();
}

absl::Status ModelWeightsLoader::LoadLayer(int64_t l, LayerWeights* out) {
  const ModelConfig& c = m_->config_;
  const LayerPlan& plan = m_->plan_.layers[static_cast<size_t>(l)];
  const TensorNames& n = *names_;
  const std::initializer_list<DType> kFloat = {DType::kF32, DType::kF16, DType::kBF16};
  LayerWeights& L = *out;
  const std::string p = absl::StrCat(n.layer_prefix, l, ".");
  SCORED_ASSIGN_OR_RETURN(L.input_layernorm, TakeChecked(p + n.input_layernorm, {c.hidden_size}, kFloat));
  SCORED_ASSIGN_OR_RETURN(L.post_attention_layernorm,
                          TakeChecked(p + n.post_attention_layernorm, {c.hidden_size}, kFloat));
  if (plan.sandwich()) {
    SCORED_ASSIGN_OR_RETURN(L.pre_feedforward_layernorm,
                            TakeChecked(p + n.pre_feedforward_layernorm, {c.hidden_size}, kFloat));
    SCORED_ASSIGN_OR_RETURN(L.post_feedforward_layernorm,
                            TakeChecked(p + n.post_feedforward_layernorm, {c.hidden_size}, kFloat));
  }
  if (plan.attention.qk_norm || plan.attention.qk_norm_whole) {  // per head, or the whole projections
    const int64_t hd = plan.attention.head_dim;
    const int64_t q_width = plan.attention.qk_norm_whole ? c.num_heads * hd : hd;
    const int64_t k_width = plan.attention.qk_norm_whole ? plan.attention.num_kv_heads * hd : hd;
    SCORED_ASSIGN_OR_RETURN(L.q_norm, TakeChecked(p + n.q_norm, {q_width}, kFloat));
    SCORED_ASSIGN_OR_RETURN(L.k_norm, TakeChecked(p + n.k_norm, {k_width}, kFloat));
  }
  L.linear_attention = plan.delta_net_mixer();
  L.latent_attention = plan.latent_attention_mixer();
  if (L.linear_attention) {
    SCORED_RETURN_IF_ERROR(LoadDeltaNet(p, plan.delta_net, &L.delta_net));
  } else if (L.latent_attention) {
    SCORED_RETURN_IF_ERROR(LoadLatentAttention(p, plan.latent, &L));
  } else {
    SCORED_RETURN_IF_ERROR(LoadAttention(p, plan.attention, &L));
  }
  if (plan.layer_scalar) {  // Gemma 4: a buffer of the checkpoint, never quantized
    SCORED_ASSIGN_OR_RETURN(L.layer_scalar, TakeChecked(p + "layer_scalar", {1}, kFloat));
  }
  L.sparse = plan.experts();
  L.parallel_dense = plan.experts() && plan.dense_glu();
  const int64_t inter = plan.channel_mixer.intermediate_size;
  if (L.sparse) SCORED_RETURN_IF_ERROR(LoadMoe(p, plan.channel_mixer.experts, &L.moe));
  if (L.parallel_dense) {  // Gemma 4: the parallel block's own norms
    const MoeTensorNames& mn = c.family->moe.names;
    SCORED_ASSIGN_OR_RETURN(L.experts_pre_norm,
                            TakeChecked(p + mn.experts_pre_norm, {c.hidden_size}, kFloat));
    SCORED_ASSIGN_OR_RETURN(L.dense_post_norm, TakeChecked(p + mn.dense_post_norm, {c.hidden_size}, kFloat));
    SCORED_ASSIGN_OR_RETURN(L.experts_post_norm,
                            TakeChecked(p + mn.experts_post_norm, {c.hidden_size}, kFloat));
  }
  if (plan.dense_glu() && n.gate_up_proj != nullptr) {
    SCORED_RETURN_IF_ERROR(LoadFused(p + n.gate_up_proj, c.hidden_size,
                                     {{inter, "gate", &L.gate_proj}, {inter, "up", &L.up_proj}}));
    SCORED_RETURN_IF_ERROR(LoadLinear(p + n.down_proj, c.hidden_size, inter, false, &L.down_proj));
  } else if (plan.dense_glu()) {
    SCORED_RETURN_IF_ERROR(LoadLinear(p + n.gate_proj, inter, c.hidden_size, false, &L.gate_proj));
    SCORED_RETURN_IF_ERROR(LoadLinear(p + n.up_proj, inter, c.hidden_size, false, &L.up_proj));
    SCORED_RETURN_IF_ERROR(LoadLinear(p + n.down_proj, c.hidden_size, inter, false, &L.down_proj));
  }
  if (L.linear_attention) return absl::OkStatus();  // no K / V cache in a DeltaNet layer
  if (L.latent_attention && m_->kv_cache_fp8_) {
    return absl::UnimplementedError(absl::StrCat(
        p, "self_attn: an FP8 KV cache (kv_cache_scheme) of multi-head latent attention is not supported"));
  }
  if (m_->kv_cache_fp8_ && toolkit_.has_value()) {  // ModelOpt's names (toolkit_quant.h)
    std::vector<std::string> used;
    SCORED_RETURN_IF_ERROR(LoadModelOptKvScales(*m_->store_, p + "self_attn", &L.k_scale, &L.v_scale, &used,
                                                &m_->transcoded_, &kv_scales_defaulted_));
    consumed_.insert(used.begin(), used.end());
  } else if (m_->kv_cache_fp8_) {
    SCORED_RETURN_IF_ERROR(LoadKvScale(p + "self_attn.k_scale", &L.k_scale));
    SCORED_RETURN_IF_ERROR(LoadKvScale(p + "self_attn.v_scale", &L.v_scale));
  }
  return absl::OkStatus();
}

absl::Status ModelWeightsLoader::Load(const std::string& model_dir) {
  SCORED_ASSIGN_OR_RETURN(m_->config_, LoadModelConfig(model_dir));
  const ModelConfig& c = m_->config_;
  m_->plan_ = PlanModel(c);
  // Tensor names and files come from the family; which tensors a layer has from its plan.
  const FamilyTraits& family = *c.family;
  SCORED_ASSIGN_OR_RETURN(toolkit_, LoadToolkitQuantConfig(c, model_dir));
  if (toolkit_.has_value()) m_->kv_cache_fp8_ = toolkit_->kv_cache_fp8;
  gpt_oss_mxfp4_ = c.has_quantization_config && IsGptOssMxfp4Config(c.quantization_config_json);
  if (gpt_oss_mxfp4_ && c.family->moe.policy != MoePolicy::kGptOss) {
    return absl::InvalidArgumentError(absl::StrCat(model_dir,
                                                   "/config.json: quantization_config quant_method "
                                                   "\"mxfp4\" is gpt-oss's expert format; ",
                                                   c.architecture, " has no gpt-oss experts"));
  }
  if (c.has_quantization_config && !toolkit_.has_value() && !gpt_oss_mxfp4_) {
    SCORED_ASSIGN_OR_RETURN(
        quant_, ParseCompressedTensorsConfig(c.quantization_config_json, model_dir + "/config.json"));
    m_->kv_cache_fp8_ = quant_->kv_cache_fp8;
  }
  SCORED_ASSIGN_OR_RETURN(m_->store_, TensorStore::Open(model_dir, family.checkpoint));
  names_ = &family.names;
  const TensorNames* alt = family.text_only.alt_names;
  if (alt != nullptr && !m_->store_->Has(family.names.embed_tokens) && m_->store_->Has(alt->embed_tokens)) {
    names_ = alt;
  }
  const TensorNames& n = *names_;
  const std::initializer_list<DType> kFloat = {DType::kF32, DType::kF16, DType::kBF16};
  SCORED_ASSIGN_OR_RETURN(m_->embed_tokens_,
                          TakeChecked(n.embed_tokens, {c.vocab_size, c.hidden_size}, kFloat));
  SCORED_ASSIGN_OR_RETURN(m_->final_norm_, TakeChecked(n.final_norm, {c.hidden_size}, kFloat));
  m_->layers_.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    SCORED_RETURN_IF_ERROR(LoadLayer(l, &m_->layers_[static_cast<size_t>(l)]));
  }
  if (c.tie_word_embeddings) {
    LinearWeight& h = m_->lm_head_;
    h.module = n.lm_head;
    h.out_features = c.vocab_size;
    h.in_features = c.hidden_size;
    h.format = WeightFormat::kDense;
    h.weight = m_->embed_tokens_;
  } else {
    SCORED_RETURN_IF_ERROR(LoadLinear(n.lm_head, c.vocab_size, c.hidden_size, false, &m_->lm_head_));
  }
  SCORED_RETURN_IF_ERROR(CheckLeftovers());
  SCORED_RETURN_IF_ERROR(CheckFiniteParameters());
  Summarize();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ModelWeights>> ModelWeights::Load(const std::string& model_dir) {
  std::unique_ptr<ModelWeights> m(new ModelWeights());
  ModelWeightsLoader loader(m.get());
  SCORED_RETURN_IF_ERROR(loader.Load(model_dir));
  return m;
}

}  // namespace scored

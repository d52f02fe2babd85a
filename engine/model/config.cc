#include "engine/model/config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/json_util.h"
#include "engine/base/status_macros.h"

namespace scored {
namespace {

using json_util::Find;
using json_util::GetBool;
using json_util::GetDouble;
using json_util::GetInt;
using json_util::GetString;
using json_util::Json;

absl::Status Invalid(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

// A token id field that may be an int, a list of ints (first taken) or null/absent (-1).
absl::StatusOr<int64_t> GetTokenId(const Json& obj, absl::string_view key, absl::string_view source) {
  const Json* v = Find(obj, key);
  if (v == nullptr) return -1;
  if (v->is_array()) {
    if (v->empty()) return -1;
    std::optional<int64_t> id = json_util::AsInt((*v)[0]);
    if (!id.has_value() || *id < 0) return json_util::TypeError(source, key, "a token id or list", *v);
    return *id;
  }
  std::optional<int64_t> id = json_util::AsInt(*v);
  if (!id.has_value() || *id < 0) return json_util::TypeError(source, key, "a token id or list", *v);
  return *id;
}

// Largest value any shape field may take. Far above every released model (Llama-3.1-405B: hidden 16384,
// 126 layers, 128 heads, vocab 128256, context 131072) yet small enough that products of a few of them
// (e.g. num_heads * head_dim * hidden_size) cannot overflow int64 and absurd configs fail here, by name,
// instead of at a huge allocation.
constexpr int64_t kMaxShapeField = int64_t{1} << 24;

absl::StatusOr<int64_t> GetPositive(const Json& obj, absl::string_view key, absl::string_view source,
                                    std::optional<int64_t> def = std::nullopt) {
  SCORED_ASSIGN_OR_RETURN(int64_t v, GetInt(obj, key, source, def));
  if (v <= 0) return Invalid(source, absl::StrCat("field '", key, "' must be positive, got ", v));
  if (v > kMaxShapeField) {
    return Invalid(source,
                   absl::StrCat("field '", key, "' = ", v, " exceeds the supported limit ", kMaxShapeField));
  }
  return v;
}

const char* RopeTypeName(RopeType type) {
  switch (type) {
    case RopeType::kDefault:
      return "default";
    case RopeType::kLinear:
      return "linear";
    case RopeType::kLlama3:
      return "llama3";
    case RopeType::kLongrope:
      return "longrope";
    case RopeType::kYarn:
      return "yarn";
    case RopeType::kProportional:
      return "proportional";
  }
  return "?";
}

// A list of positive numbers (longrope's short_factor / long_factor).
absl::Status GetFactorList(const Json& obj, absl::string_view key, absl::string_view source,
                           std::vector<double>* out) {
  const Json* v = Find(obj, key);
  if (v == nullptr || !v->is_array()) {
    return Invalid(source, absl::StrCat("field '", key, "' must be a list of numbers"));
  }
  out->clear();
  for (const Json& x : *v) {
    if (!x.is_number()) return json_util::TypeError(source, key, "a list of numbers", *v);
    const double f = x.get<double>();
    if (!(f > 0.0) || !std::isfinite(f)) {
      return Invalid(source, absl::StrCat("field '", key, "' holds ", x.dump(), ", not a positive number"));
    }
    out->push_back(f);
  }
  return absl::OkStatus();
}

// A number that must be > 0 when present and non-null; absent or null: `absent`.
absl::StatusOr<double> GetOptionalPositive(const Json& obj, absl::string_view key, absl::string_view field,
                                           absl::string_view ctx, double absent) {
  const Json* present = Find(obj, key);
  if (present == nullptr || present->is_null()) return absent;
  SCORED_ASSIGN_OR_RETURN(const double v, GetDouble(obj, key, ctx));
  if (!(v > 0.0) || !std::isfinite(v)) {
    return Invalid(ctx, absl::StrCat(field, ".", key, " must be a positive number, got ", v));
  }
  return v;
}

// yarn's fields (RopeScaling's comment: transformers' _compute_yarn_parameters). Values transformers reads
// with `or` (beta_fast, beta_slow: 0 means the default; mscale, mscale_all_dim: 0 means absent) keep that
// meaning. factor and original_max_position_embeddings, when absent, are settled by FinishYarn.
absl::Status ParseYarn(const Json& rs, absl::string_view field, absl::string_view ctx, RopeScaling* out) {
  out->type = RopeType::kYarn;
  SCORED_ASSIGN_OR_RETURN(out->factor, GetOptionalPositive(rs, "factor", field, ctx, 0.0));
  SCORED_ASSIGN_OR_RETURN(out->attention_factor,
                          GetOptionalPositive(rs, "attention_factor", field, ctx, 0.0));
  SCORED_ASSIGN_OR_RETURN(out->beta_fast, GetDouble(rs, "beta_fast", ctx, 32.0));
  SCORED_ASSIGN_OR_RETURN(out->beta_slow, GetDouble(rs, "beta_slow", ctx, 1.0));
  if (out->beta_fast == 0.0) out->beta_fast = 32.0;
  if (out->beta_slow == 0.0) out->beta_slow = 1.0;
  if (!(out->beta_fast > 0.0) || !(out->beta_slow > 0.0) || !std::isfinite(out->beta_fast) ||
      !std::isfinite(out->beta_slow)) {
    return Invalid(ctx, absl::StrCat(field, ": beta_fast (", out->beta_fast, ") and beta_slow (",
                                     out->beta_slow, ") must be positive numbers"));
  }
  SCORED_ASSIGN_OR_RETURN(out->mscale, GetDouble(rs, "mscale", ctx, 0.0));
  SCORED_ASSIGN_OR_RETURN(out->mscale_all_dim, GetDouble(rs, "mscale_all_dim", ctx, 0.0));
  if (!std::isfinite(out->mscale) || !std::isfinite(out->mscale_all_dim)) {
    return Invalid(ctx, absl::StrCat(field, ": mscale and mscale_all_dim must be finite"));
  }
  SCORED_ASSIGN_OR_RETURN(out->truncate, GetBool(rs, "truncate", ctx, true));
  out->original_max_position_embeddings = 0;  // absent: FinishYarn
  if (Find(rs, "original_max_position_embeddings") != nullptr) {
    SCORED_ASSIGN_OR_RETURN(out->original_max_position_embeddings,
                            GetPositive(rs, "original_max_position_embeddings", ctx));
  }
  return absl::OkStatus();
}

// rope_scaling (or the scaling part of rope_parameters). `field` names it in messages.
absl::Status ParseRopeScaling(const Json& rs, absl::string_view field, absl::string_view source,
                              RopeScaling* out) {
  if (!rs.is_object()) return Invalid(source, absl::StrCat("'", field, "' must be an object or null"));
  std::string type;
  if (const Json* t = Find(rs, "rope_type")) {
    if (!t->is_string())
      return json_util::TypeError(source, absl::StrCat(field, ".rope_type"), "a string", *t);
    type = t->get<std::string>();
  } else if (const Json* t2 = Find(rs, "type")) {
    if (!t2->is_string()) return json_util::TypeError(source, absl::StrCat(field, ".type"), "a string", *t2);
    type = t2->get<std::string>();
  } else {
    return Invalid(source, absl::StrCat("'", field, "' has neither 'rope_type' nor 'type'"));
  }
  const std::string ctx = absl::StrCat(source, " (", field, ")");
  if (type == "default") {
    out->type = RopeType::kDefault;
    return absl::OkStatus();
  }
  if (type == "linear") {
    out->type = RopeType::kLinear;
    SCORED_ASSIGN_OR_RETURN(out->factor, GetDouble(rs, "factor", ctx));
  } else if (type == "llama3") {
    out->type = RopeType::kLlama3;
    SCORED_ASSIGN_OR_RETURN(out->factor, GetDouble(rs, "factor", ctx));
    SCORED_ASSIGN_OR_RETURN(out->low_freq_factor, GetDouble(rs, "low_freq_factor", ctx));
    SCORED_ASSIGN_OR_RETURN(out->high_freq_factor, GetDouble(rs, "high_freq_factor", ctx));
    SCORED_ASSIGN_OR_RETURN(out->original_max_position_embeddings,
                            GetPositive(rs, "original_max_position_embeddings", ctx));
    if (!(out->high_freq_factor > out->low_freq_factor)) {
      return Invalid(source, absl::StrCat(field, ": high_freq_factor must exceed low_freq_factor"));
    }
  } else if (type == "longrope" || type == "su") {  // "su": Phi-3's older name (transformers maps it)
    out->type = RopeType::kLongrope;
    SCORED_RETURN_IF_ERROR(GetFactorList(rs, "short_factor", ctx, &out->short_factor));
    SCORED_RETURN_IF_ERROR(GetFactorList(rs, "long_factor", ctx, &out->long_factor));
    out->factor = 0.0;  // absent: ParseRope derives it from max_position_embeddings
    if (Find(rs, "factor") != nullptr && !(*Find(rs, "factor")).is_null()) {
      SCORED_ASSIGN_OR_RETURN(out->factor, GetDouble(rs, "factor", ctx));
      if (!(out->factor > 0.0)) return Invalid(source, absl::StrCat(field, ".factor must be positive"));
    }
    out->attention_factor = 0.0;  // absent: ParseRope computes it
    if (Find(rs, "attention_factor") != nullptr && !(*Find(rs, "attention_factor")).is_null()) {
      SCORED_ASSIGN_OR_RETURN(out->attention_factor, GetDouble(rs, "attention_factor", ctx));
      if (!(out->attention_factor > 0.0)) {
        return Invalid(source, absl::StrCat(field, ".attention_factor must be positive"));
      }
    }
    out->original_max_position_embeddings = 0;  // absent: ParseRope takes the top-level field
    if (Find(rs, "original_max_position_embeddings") != nullptr) {
      SCORED_ASSIGN_OR_RETURN(out->original_max_position_embeddings,
                              GetPositive(rs, "original_max_position_embeddings", ctx));
    }
    return absl::OkStatus();
  } else if (type == "yarn") {
    return ParseYarn(rs, field, ctx, out);
  } else if (type == "proportional") {  // Gemma 4's full layers (RopeScaling::proportion)
    out->type = RopeType::kProportional;
    SCORED_ASSIGN_OR_RETURN(out->factor, GetDouble(rs, "factor", ctx, 1.0));
    SCORED_ASSIGN_OR_RETURN(out->proportion, GetDouble(rs, "partial_rotary_factor", ctx, 1.0));
    if (!(out->proportion > 0.0) || out->proportion > 1.0) {
      return Invalid(source,
                     absl::StrCat(field, ".partial_rotary_factor must be in (0, 1], got ", out->proportion));
    }
  } else {
    return Invalid(source,
                   absl::StrCat("unsupported ", field, " type '", type,
                                "' (supported: default, linear, llama3, longrope, yarn, proportional)"));
  }
  if (!(out->factor > 0.0)) return Invalid(source, absl::StrCat(field, ".factor must be positive"));
  return absl::OkStatus();
}

// rotary_dim = int(head_dim * partial_rotary_factor) (top level, else rope_parameters, else the family's
// default; FamilyTraits::partial_rotary).
absl::Status ParsePartialRotary(const Json& j, const Json* rope_params, const FamilyTraits& family,
                                const std::string& source, ModelConfig* out) {
  ModelConfig& c = *out;
  c.rotary_dim = c.head_dim;
  const PartialRotaryTraits& traits = family.partial_rotary;
  double factor = traits.default_factor;
  const char* field = nullptr;
  if (Find(j, "partial_rotary_factor") != nullptr) {
    field = "partial_rotary_factor";
    SCORED_ASSIGN_OR_RETURN(factor, GetDouble(j, "partial_rotary_factor", source));
  } else if (rope_params != nullptr && Find(*rope_params, "partial_rotary_factor") != nullptr) {
    field = "rope_parameters.partial_rotary_factor";
    SCORED_ASSIGN_OR_RETURN(factor, GetDouble(*rope_params, "partial_rotary_factor", source));
  }
  if (traits.rotary_dim_field && Find(j, "rotary_dim") != nullptr) {
    SCORED_ASSIGN_OR_RETURN(const int64_t rotary_dim, GetPositive(j, "rotary_dim", source));
    const int64_t from_factor = static_cast<int64_t>(static_cast<double>(c.head_dim) * factor);
    if (field != nullptr && rotary_dim != from_factor) {
      return Invalid(source,
                     absl::StrCat("fields 'rotary_dim' (", rotary_dim, ") and '", field, "' (", factor,
                                  ", i.e. ", from_factor, " of head_dim ", c.head_dim, ") disagree"));
    }
    if (rotary_dim > c.head_dim || rotary_dim % 2 != 0) {
      return Invalid(source, absl::StrCat("field 'rotary_dim' = ", rotary_dim,
                                          " is not even and <= head_dim ", c.head_dim));
    }
    c.rotary_dim = rotary_dim;
    return absl::OkStatus();
  }
  if (factor == 1.0) return absl::OkStatus();
  if (field == nullptr) field = "partial_rotary_factor";  // the family's default
  if (!traits.enabled) {
    return Invalid(source, absl::StrCat("unsupported ", field, " ", factor, " for ", c.architecture));
  }
  if (!(factor > 0.0 && factor <= 1.0)) {
    return Invalid(source, absl::StrCat("field '", field, "' = ", factor, " is not in (0, 1]"));
  }
  // transformers: dim = int(head_dim * partial_rotary_factor), truncated.
  c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * factor);
  if (c.rotary_dim <= 0 || c.rotary_dim % 2 != 0) {
    return Invalid(source, absl::StrCat("field '", field, "' = ", factor, " gives ", c.rotary_dim,
                                        " rotary dimensions of head_dim ", c.head_dim, ": not even and > 0"));
  }
  return absl::OkStatus();
}

// longrope's and yarn's shared defaults: a top-level original_max_position_embeddings wins over the
// scaling's own, which defaults to `default_original` when absent; factor defaults to max_position_embeddings
// / original.
absl::Status SettleOriginalAndFactor(const Json& j, const std::string& source, int64_t default_original,
                                     ModelConfig* c) {
  RopeScaling& r = c->rope_scaling;
  if (Find(j, "original_max_position_embeddings") != nullptr) {
    SCORED_ASSIGN_OR_RETURN(r.original_max_position_embeddings,
                            GetPositive(j, "original_max_position_embeddings", source));
  } else if (r.original_max_position_embeddings == 0) {
    r.original_max_position_embeddings = default_original;
  }
  if (r.factor == 0.0) {
    r.factor = static_cast<double>(c->max_position_embeddings) /
               static_cast<double>(r.original_max_position_embeddings);
  }
  return absl::OkStatus();
}

// longrope's defaults (transformers' _compute_longrope_parameters with Phi-3's config): the top-level
// original_max_position_embeddings wins over the scaling's own; factor defaults to max_position_embeddings /
// original; attention_factor to sqrt(1 + ln(factor) / ln(original)) (1 when factor <= 1).
absl::Status FinishLongrope(const Json& j, const std::string& source, ModelConfig* out) {
  ModelConfig& c = *out;
  RopeScaling& r = c.rope_scaling;
  SCORED_RETURN_IF_ERROR(SettleOriginalAndFactor(j, source, /*default_original=*/4096, &c));  // Phi3Config's
  const double original = static_cast<double>(r.original_max_position_embeddings);
  if (r.attention_factor == 0.0) {
    r.attention_factor = r.factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(r.factor) / std::log(original));
  }
  const size_t half = static_cast<size_t>(c.rotary_dim / 2);
  for (const auto* list : {&r.short_factor, &r.long_factor}) {
    if (list->size() != half) {
      return Invalid(
          source, absl::StrCat("rope scaling '", list == &r.short_factor ? "short" : "long", "_factor' has ",
                               list->size(), " entries, expected rotary_dim / 2 = ", half));
    }
  }
  return absl::OkStatus();
}

// yarn's defaults, as transformers 5.17 settles them (PreTrainedConfig.standardize_rope_params, then
// _compute_yarn_parameters): a top-level original_max_position_embeddings wins over the scaling's own, which
// defaults to max_position_embeddings; factor defaults to max_position_embeddings / original; then
// attention_factor from factor and the mscales (RopeScaling's comment).
absl::Status FinishYarn(const Json& j, const std::string& source, ModelConfig* out) {
  ModelConfig& c = *out;
  RopeScaling& r = c.rope_scaling;
  SCORED_RETURN_IF_ERROR(SettleOriginalAndFactor(j, source, c.max_position_embeddings, &c));
  if (r.attention_factor == 0.0) {
    const auto get_mscale = [](double scale, double mscale) {
      return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
    };
    r.attention_factor = r.mscale != 0.0 && r.mscale_all_dim != 0.0
                             ? get_mscale(r.factor, r.mscale) / get_mscale(r.factor, r.mscale_all_dim)
                             : get_mscale(r.factor, 1.0);
  }
  return absl::OkStatus();
}

absl::Status ParseRope(const Json& j, const FamilyTraits& family, const std::string& source,
                       ModelConfig* out);

// Gemma 3: the global RoPE (full layers) and the local one (sliding layers). transformers 5 writes
// rope_parameters {"full_attention": {rope_type, rope_theta, ...}, "sliding_attention": {...}}; older files
// rope_theta (global, default 1e6), rope_local_base_freq (local, default 1e4) and rope_scaling (global).
// As Gemma3TextConfig.convert_rope_params_to_dict: a part absent from rope_parameters is the default type,
// and a part's absent rope_theta is the older field's value. What that function would read differently is
// refused: keys other than the two layer types, rope_scaling next to rope_parameters (it merges them), and a
// partial_rotary_factor (transformers' default RoPE honours it, this family's engine does not).
absl::Status ParseLocalGlobalRope(const Json& j, const FamilyTraits& family, const std::string& source,
                                  ModelConfig* out) {
  ModelConfig& c = *out;
  struct Part {
    const char* key;
    const char* theta_field;  // the older files' field, and the default when it is absent
    double theta_default;
    double* theta;
    RopeScaling* scaling;
  };
  const Part parts[] = {
      {"full_attention", "rope_theta", 1000000.0, &c.rope_theta, &c.rope_scaling},
      {"sliding_attention", "rope_local_base_freq", 10000.0, &c.local_rope_theta, &c.local_rope_scaling}};
  for (const Part& p : parts) {
    SCORED_ASSIGN_OR_RETURN(*p.theta, GetDouble(j, p.theta_field, source, p.theta_default));
    if (!(*p.theta > 0.0)) return Invalid(source, absl::StrCat(p.theta_field, " must be positive"));
  }
  const Json* rs = Find(j, "rope_scaling");
  if (const Json* rp = Find(j, "rope_parameters")) {
    if (!rp->is_object()) return Invalid(source, "'rope_parameters' must be an object or null");
    for (const auto& item : rp->items()) {
      if (item.key() != "full_attention" && item.key() != "sliding_attention") {
        return Invalid(source,
                       absl::StrCat("unsupported rope_parameters key '", item.key(), "' for ", c.architecture,
                                    " (expected one entry per layer type: full_attention, "
                                    "sliding_attention)"));
      }
    }
    if (rs != nullptr) {
      return Invalid(source, absl::StrCat("both rope_parameters and rope_scaling (", rs->dump(),
                                          ") are set for ", c.architecture, ": not supported"));
    }
    for (const Part& p : parts) {
      const Json* sub = Find(*rp, p.key);
      if (sub == nullptr) continue;  // the default type with the older field's theta
      const std::string field = absl::StrCat("rope_parameters.", p.key);
      SCORED_ASSIGN_OR_RETURN(
          *p.theta, GetDouble(*sub, "rope_theta", absl::StrCat(source, " (", field, ")"), *p.theta));
      if (!(*p.theta > 0.0)) return Invalid(source, absl::StrCat(field, ".rope_theta must be positive"));
      SCORED_RETURN_IF_ERROR(ParseRopeScaling(*sub, field, source, p.scaling));
      // proportional RoPE reads its partial_rotary_factor itself (the whole head rotates, part of it by 0)
      if (p.scaling->type != RopeType::kProportional) {
        SCORED_RETURN_IF_ERROR(ParsePartialRotary(j, sub, family, source, &c));
      }
    }
  } else if (rs != nullptr) {
    SCORED_RETURN_IF_ERROR(ParseRopeScaling(*rs, "rope_scaling", source, &c.rope_scaling));
  }
  for (const Part& p : parts) {
    if ((family.rope_scalings & RopeTypeBit(p.scaling->type)) == 0) {
      return Invalid(source, absl::StrCat("rope scaling type '", RopeTypeName(p.scaling->type), "' (", p.key,
                                          ") is not supported for ", c.architecture));
    }
  }
  return ParsePartialRotary(j, nullptr, family, source, &c);
}

// rope_theta and rope scaling: rope_theta at top level, or (newer files) inside rope_parameters, which may
// also carry the scaling; rope_scaling, when present and non-null, describes the scaling. The scaling type
// must be one the family allows.
absl::Status ParseRope(const Json& j, const FamilyTraits& family, const std::string& source,
                       ModelConfig* out) {
  ModelConfig& c = *out;
  c.rope_theta = 10000.0;
  const Json* rope_params = Find(j, "rope_parameters");
  if (family.gemma.local_rope) return ParseLocalGlobalRope(j, family, source, out);
  if (rope_params != nullptr) {
    if (!rope_params->is_object()) return Invalid(source, "'rope_parameters' must be an object or null");
    for (const char* layer_type : {"full_attention", "sliding_attention"}) {
      if (Find(*rope_params, layer_type) != nullptr) {  // Gemma 3's form: one RoPE per layer type
        return Invalid(source, absl::StrCat("rope_parameters per layer type ('", layer_type,
                                            "') is not supported for ", c.architecture));
      }
    }
    if (Find(*rope_params, "rope_theta") != nullptr) {
      SCORED_ASSIGN_OR_RETURN(
          c.rope_theta, GetDouble(*rope_params, "rope_theta", absl::StrCat(source, " (rope_parameters)")));
    }
    if (Find(*rope_params, "rope_type") != nullptr || Find(*rope_params, "type") != nullptr) {
      SCORED_RETURN_IF_ERROR(ParseRopeScaling(*rope_params, "rope_parameters", source, &c.rope_scaling));
    }
  }
  if (Find(j, "rope_theta") != nullptr) {
    SCORED_ASSIGN_OR_RETURN(c.rope_theta, GetDouble(j, "rope_theta", source));
  }
  if (!(c.rope_theta > 0.0)) return Invalid(source, "rope_theta must be positive");
  if (const Json* rs = Find(j, "rope_scaling")) {
    SCORED_RETURN_IF_ERROR(ParseRopeScaling(*rs, "rope_scaling", source, &c.rope_scaling));
  }
  if ((family.rope_scalings & RopeTypeBit(c.rope_scaling.type)) == 0) {
    return Invalid(source, absl::StrCat("rope scaling type '", RopeTypeName(c.rope_scaling.type),
                                        "' is not supported for ", c.architecture));
  }
  SCORED_RETURN_IF_ERROR(ParsePartialRotary(j, rope_params, family, source, &c));
  if (c.rope_scaling.type == RopeType::kLongrope) SCORED_RETURN_IF_ERROR(FinishLongrope(j, source, &c));
  if (c.rope_scaling.type == RopeType::kYarn) SCORED_RETURN_IF_ERROR(FinishYarn(j, source, &c));
  return absl::OkStatus();
}

// SlidingWindowPolicy::kLayerTypes: layer_window from layer_types (or the family's pattern) and
// sliding_window; Gemma 3's local RoPE goes to the sliding layers.
absl::Status ParseLayerTypes(const Json& j, const FamilyTraits& family, const std::string& source,
                             ModelConfig* out) {
  ModelConfig& c = *out;
  const size_t n = static_cast<size_t>(c.num_layers);
  std::vector<bool> sliding(n);
  if (const Json* types = Find(j, "layer_types")) {
    if (!types->is_array() || types->size() != n) {
      return Invalid(
          source, absl::StrCat("field 'layer_types' must be a list of num_hidden_layers (", n, ") strings"));
    }
    for (size_t l = 0; l < n; ++l) {
      const Json& t = (*types)[l];
      if (t == "sliding_attention") {
        sliding[l] = true;
      } else if (t != "full_attention" &&
                 t != "attention") {  // "attention": the legacy name transformers remaps
        return Invalid(source, absl::StrCat("unsupported layer_types[", l, "] ", t.dump(),
                                            " (supported: sliding_attention, full_attention)"));
      }
    }
  } else {
    SCORED_ASSIGN_OR_RETURN(int64_t pattern,
                            GetPositive(j, "sliding_window_pattern", source, family.gemma.sliding_pattern));
    for (size_t l = 0; l < n; ++l) sliding[l] = (static_cast<int64_t>(l) + 1) % pattern != 0;
  }
  int64_t window = 4096;  // Gemma2Config / Gemma3TextConfig default
  const Json* sw = Find(j, "sliding_window");
  if (sw != nullptr && !sw->is_null()) {
    SCORED_ASSIGN_OR_RETURN(window, GetPositive(j, "sliding_window", source));
  }
  c.layer_window.assign(n, 0);
  for (size_t l = 0; l < n; ++l) c.layer_window[l] = sliding[l] ? window : 0;
  if (family.gemma.local_rope) c.layer_local_rope = sliding;
  return absl::OkStatus();
}

// QkNormPolicy: ModelConfig::qk_norm / qk_norm_whole.
absl::Status ParseQkNorm(const Json& j, const FamilyTraits& family, const std::string& source,
                         ModelConfig* out) {
  ModelConfig& c = *out;
  switch (family.qk_norm) {
    case QkNormPolicy::kNone:
      break;
    case QkNormPolicy::kPerHead:
      c.qk_norm = true;
      break;
    case QkNormPolicy::kPerHeadField: {
      SCORED_ASSIGN_OR_RETURN(c.qk_norm, GetBool(j, "use_qk_norm", source, false));
      break;
    }
    case QkNormPolicy::kWholeProjection: {
      // transformers 5.17 always normalizes; the remote code's switches must say the same.
      SCORED_ASSIGN_OR_RETURN(const bool use, GetBool(j, "use_qk_norm", source, true));
      SCORED_ASSIGN_OR_RETURN(const std::string type,
                              GetString(j, "qk_norm_type", source, std::string("per_layer")));
      if (!use || type != "per_layer") {
        return Invalid(source, absl::StrCat("unsupported use_qk_norm ", use ? "true" : "false",
                                            " / qk_norm_type '", type, "' for ", c.architecture,
                                            " (transformers 5.17 normalizes the whole q and k projections: "
                                            "use_qk_norm true, qk_norm_type per_layer)"));
      }
      c.qk_norm_whole = true;
      break;
    }
  }
  return absl::OkStatus();
}

// The flags whose meaning differs by family (family.h): q/k/v bias, q/k norm, sliding window.
absl::Status ApplyFamilyPolicies(const Json& j, const FamilyTraits& family, const std::string& source,
                                 ModelConfig* out) {
  ModelConfig& c = *out;
  // Biases and norms.
  SCORED_ASSIGN_OR_RETURN(bool mlp_bias, GetBool(j, "mlp_bias", source, false));
  if (mlp_bias) return Invalid(source, "unsupported mlp_bias: true");
  SCORED_ASSIGN_OR_RETURN(bool attention_bias, GetBool(j, "attention_bias", source, false));
  switch (family.attention_bias) {
    case AttentionBiasPolicy::kQkvAlways:
      c.attention_bias = true;  // q/k/v bias, no o_proj bias, whatever attention_bias says
      break;
    case AttentionBiasPolicy::kQkvBiasField: {
      SCORED_ASSIGN_OR_RETURN(c.attention_bias, GetBool(j, "qkv_bias", source, true));
      break;
    }
    case AttentionBiasPolicy::kAllFourField:
      c.attention_bias = c.o_proj_bias = attention_bias;  // q, k, v and o_proj
      break;
    case AttentionBiasPolicy::kQkvField:
      c.attention_bias = attention_bias;  // q, k and v; o_proj never
      break;
    case AttentionBiasPolicy::kNoneOrRejected:
      if (attention_bias) {
        return Invalid(source,
                       absl::StrCat("unsupported attention_bias: true for ", c.architecture,
                                    ", whose attention linears have no bias in transformers (supported: "
                                    "attention_bias true for Llama, Qwen3, Qwen3-MoE, Gemma 2 / 3)"));
      }
      break;
  }
  SCORED_RETURN_IF_ERROR(ParseQkNorm(j, family, source, &c));

  // Sliding window.
  switch (family.sliding_window) {
    case SlidingWindowPolicy::kUseSlidingWindowFlag: {
      SCORED_ASSIGN_OR_RETURN(bool use_sw, GetBool(j, "use_sliding_window", source, false));
      if (use_sw) return Invalid(source, "unsupported use_sliding_window: true");
      break;
    }
    case SlidingWindowPolicy::kWindowFieldMasked: {
      const Json* sw = Find(j, "sliding_window");
      if (sw != nullptr && !sw->is_null()) {
        SCORED_ASSIGN_OR_RETURN(int64_t w, GetPositive(j, "sliding_window", source));
        c.layer_window.assign(static_cast<size_t>(c.num_layers), w);
      }
      break;
    }
    case SlidingWindowPolicy::kLayerTypes:
      SCORED_RETURN_IF_ERROR(ParseLayerTypes(j, family, source, &c));
      break;
    case SlidingWindowPolicy::kWindowField:
      if (Find(j, "sliding_window") != nullptr) {
        SCORED_ASSIGN_OR_RETURN(int64_t sw, GetPositive(j, "sliding_window", source));
        c.sliding_window = sw < c.max_position_embeddings ? sw : 0;
      }
      break;
  }
  return absl::OkStatus();
}

// A remote-code field of the published configs that transformers 5.17 does not read: absent, or `want`.
absl::Status CheckRemoteCodeString(const Json& j, const char* field, const char* want,
                                   const std::string& source, const std::string& architecture) {
  if (Find(j, field) == nullptr) return absl::OkStatus();
  SCORED_ASSIGN_OR_RETURN(const std::string value, GetString(j, field, source));
  if (value == want) return absl::OkStatus();
  return Invalid(source, absl::StrCat("unsupported ", field, " '", value, "' for ", architecture, " (only ",
                                      want, ", what transformers 5.17 computes)"));
}

// DeepSeek-V3's groups (n_group, topk_group), checked as transformers' router needs them: the experts split
// into equal groups, a group's score its two largest choices, enough experts in the kept groups for the top
// k.
absl::Status ParseRouterGroups(const Json& j, const std::string& source, ModelConfig* out) {
  ModelConfig& c = *out;
  SCORED_ASSIGN_OR_RETURN(c.router_num_groups, GetPositive(j, "n_group", source));
  SCORED_ASSIGN_OR_RETURN(c.router_topk_groups, GetPositive(j, "topk_group", source));
  const int64_t groups = c.router_num_groups, experts = c.num_experts;
  if (experts % groups != 0 || experts / groups < 2) {
    return Invalid(source, absl::StrCat("field 'n_group' = ", groups, " does not split the ", experts,
                                        " experts into equal groups of at least 2"));
  }
  if (c.router_topk_groups > groups) {
    return Invalid(
        source, absl::StrCat("field 'topk_group' = ", c.router_topk_groups, " exceeds 'n_group' = ", groups));
  }
  if (c.num_experts_per_tok > c.router_topk_groups * (experts / groups)) {
    return Invalid(source, absl::StrCat("field 'num_experts_per_tok' = ", c.num_experts_per_tok,
                                        " exceeds the experts of the topk_group (", c.router_topk_groups,
                                        ") kept groups of ", experts / groups));
  }
  return absl::OkStatus();
}

// kSigmoidGroupLimited's dense first layers: l < first_k_dense_replace (what transformers 5.17's
// DeepseekV3DecoderLayer / Glm4MoeDecoderLayer read); a `mlp_layer_types` list ("dense" / "sparse", later
// config classes' form of the same) must agree with it.
absl::Status ParseDenseFirstLayers(const Json& j, const std::string& source, ModelConfig* out) {
  ModelConfig& c = *out;
  SCORED_ASSIGN_OR_RETURN(const int64_t first_k, GetInt(j, "first_k_dense_replace", source));
  if (first_k < 0) {
    return Invalid(source, absl::StrCat("field 'first_k_dense_replace' must be >= 0, got ", first_k));
  }
  for (int64_t l = 0; l < c.num_layers; ++l) c.sparse_layers[static_cast<size_t>(l)] = l >= first_k;
  const Json* types = Find(j, "mlp_layer_types");
  if (types == nullptr) return absl::OkStatus();
  if (!types->is_array() || static_cast<int64_t>(types->size()) != c.num_layers) {
    return Invalid(source, absl::StrCat("field 'mlp_layer_types' must be a list of num_hidden_layers (",
                                        c.num_layers, ") strings"));
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Json& t = (*types)[static_cast<size_t>(l)];
    const std::string type = t.is_string() ? t.get<std::string>() : "";
    if (type != "dense" && type != "sparse") {
      return Invalid(source,
                     absl::StrCat("unsupported mlp_layer_types[", l, "] ", t.dump(), " (dense or sparse)"));
    }
    if ((type == "sparse") != c.sparse_layers[static_cast<size_t>(l)]) {
      return Invalid(source, absl::StrCat("mlp_layer_types[", l, "] ", t.dump(),
                                          " disagrees with first_k_dense_replace = ", first_k));
    }
  }
  return absl::OkStatus();
}

// MoePolicy::kSigmoidGroupLimited and kMiniMaxM2: DeepSeek-V3's sigmoid router family (ModelConfig's
// semantics; family.h says which fields each reads).
absl::Status ParseSigmoidRouterMoe(const Json& j, const FamilyTraits& family, const std::string& source,
                                   ModelConfig* out) {
  ModelConfig& c = *out;
  const bool minimax = family.moe.policy == MoePolicy::kMiniMaxM2;
  // The count: DeepSeek's n_routed_experts (its config classes map num_local_experts to it), MiniMax's
  // num_local_experts (num_experts mapped to it). Both present must agree.
  const char* names[2] = {minimax ? "num_local_experts" : "n_routed_experts",
                          minimax ? "num_experts" : "num_local_experts"};
  const char* field = Find(j, names[0]) != nullptr || Find(j, names[1]) == nullptr ? names[0] : names[1];
  SCORED_ASSIGN_OR_RETURN(c.num_experts, GetPositive(j, field, source));
  const char* other = field == names[0] ? names[1] : names[0];
  if (Find(j, other) != nullptr) {
    SCORED_ASSIGN_OR_RETURN(const int64_t n, GetPositive(j, other, source));
    if (n != c.num_experts) {
      return Invalid(source, absl::StrCat("fields '", field, "' (", c.num_experts, ") and '", other, "' (", n,
                                          ") disagree"));
    }
  }
  SCORED_ASSIGN_OR_RETURN(c.num_experts_per_tok, GetPositive(j, "num_experts_per_tok", source));
  if (c.num_experts_per_tok > c.num_experts) {
    return Invalid(source, absl::StrCat("field 'num_experts_per_tok' = ", c.num_experts_per_tok, " exceeds '",
                                        field, "' = ", c.num_experts));
  }
  // Remote-code switches of the published configs: they must describe this router.
  SCORED_RETURN_IF_ERROR(CheckRemoteCodeString(j, "scoring_func", "sigmoid", source, c.architecture));
  c.sigmoid_router = true;
  c.router_correction_bias = true;
  c.shared_expert_gated = false;
  c.sparse_layers.assign(static_cast<size_t>(c.num_layers), true);
  if (minimax) {
    SCORED_ASSIGN_OR_RETURN(const bool routing_bias, GetBool(j, "use_routing_bias", source, true));
    SCORED_ASSIGN_OR_RETURN(const int64_t shared, GetInt(j, "shared_intermediate_size", source, 0));
    if (!routing_bias || shared != 0) {
      return Invalid(source, absl::StrCat("unsupported use_routing_bias false / shared_intermediate_size ",
                                          shared, " for ", c.architecture,
                                          " (transformers 5.17: a correction bias, no shared expert)"));
    }
    if (const Json* types = Find(j, "attn_type_list"); types != nullptr && types->is_array()) {
      for (const Json& t : *types) {
        if (json_util::AsInt(t) != std::optional<int64_t>(1)) {
          return Invalid(source, "attn_type_list holds a layer that is not full softmax attention (1)");
        }
      }
    }
    c.moe_intermediate_size = c.intermediate_size;  // MixtralExperts: intermediate_size wide
    c.norm_topk_prob = true;                        // MiniMaxM2TopKRouter: top_k_weights /= their sum
    return absl::OkStatus();
  }
  SCORED_RETURN_IF_ERROR(CheckRemoteCodeString(j, "topk_method", "noaux_tc", source, c.architecture));
  SCORED_ASSIGN_OR_RETURN(c.moe_intermediate_size, GetPositive(j, "moe_intermediate_size", source));
  SCORED_ASSIGN_OR_RETURN(c.norm_topk_prob, GetBool(j, "norm_topk_prob", source));
  c.router_renorm_epsilon = 1e-20f;  // DeepseekV3TopkRouter: topk_weights.sum(...) + 1e-20
  SCORED_ASSIGN_OR_RETURN(const double scale, GetDouble(j, "routed_scaling_factor", source));
  if (!(scale > 0.0) || !std::isfinite(scale)) {
    return Invalid(source,
                   absl::StrCat("field 'routed_scaling_factor' must be a positive number, got ", scale));
  }
  c.routed_scaling_factor = static_cast<float>(scale);
  SCORED_RETURN_IF_ERROR(ParseRouterGroups(j, source, &c));
  SCORED_ASSIGN_OR_RETURN(const int64_t shared, GetInt(j, "n_shared_experts", source));
  if (shared < 0 || shared > kMaxShapeField / c.moe_intermediate_size) {
    return Invalid(source, absl::StrCat("field 'n_shared_experts' = ", shared, " is out of range"));
  }
  c.shared_expert_intermediate_size = shared * c.moe_intermediate_size;
  return ParseDenseFirstLayers(j, source, &c);
}

// MoePolicy::kGptOss (transformers 5.17 GptOssMLP): num_local_experts experts of intermediate_size on every
// layer, the biased router's top-k softmax, biased experts with the clamped SwiGLU. GptOssExperts fixes its
// clamp at 7 and alpha at 1.702; a config.json swiglu_limit (the published files carry 7.0) must agree.
absl::Status ParseGptOssMoe(const Json& j, const std::string& source, ModelConfig* out) {
  ModelConfig& c = *out;
  SCORED_ASSIGN_OR_RETURN(c.num_experts, GetPositive(j, "num_local_experts", source));
  SCORED_ASSIGN_OR_RETURN(c.num_experts_per_tok, GetPositive(j, "num_experts_per_tok", source));
  if (c.num_experts_per_tok > c.num_experts) {
    return Invalid(source, absl::StrCat("field 'num_experts_per_tok' = ", c.num_experts_per_tok,
                                        " exceeds 'num_local_experts' = ", c.num_experts));
  }
  if (Find(j, "experts_per_token") != nullptr) {  // the original checkpoints' name, beside the HF one
    SCORED_ASSIGN_OR_RETURN(const int64_t k, GetPositive(j, "experts_per_token", source));
    if (k != c.num_experts_per_tok) {
      return Invalid(source, absl::StrCat("fields 'experts_per_token' (", k, ") and 'num_experts_per_tok' (",
                                          c.num_experts_per_tok, ") disagree"));
    }
  }
  if (Find(j, "swiglu_limit") != nullptr) {
    SCORED_ASSIGN_OR_RETURN(const double limit, GetDouble(j, "swiglu_limit", source));
    if (limit != 7.0) {
      return Invalid(source, absl::StrCat("unsupported swiglu_limit ", limit, " for ", c.architecture,
                                          " (transformers 5.17's GptOssExperts clamps at 7.0)"));
    }
  }
  c.moe_intermediate_size = c.intermediate_size;
  c.norm_topk_prob = true;  // the softmax over the top k: weights that sum to 1
  c.router_topk_softmax = true;
  c.router_bias = true;
  c.expert_bias = true;
  c.mlp_activation = MlpActivation::kClampedSwiGlu;
  c.sparse_layers.assign(static_cast<size_t>(c.num_layers), true);
  return absl::OkStatus();
}

// The mixture-of-experts fields (MoePolicy): expert count, top k, expert width, renormalization, which
// layers are sparse. Every error names the config.json field.
absl::Status ParseMoe(const Json& j, const FamilyTraits& family, const std::string& source,
                      ModelConfig* out) {
  ModelConfig& c = *out;
  const MoePolicy policy = family.moe.policy;
  if (policy == MoePolicy::kNone) return absl::OkStatus();
  if (policy == MoePolicy::kSigmoidGroupLimited || policy == MoePolicy::kMiniMaxM2) {
    return ParseSigmoidRouterMoe(j, family, source, out);
  }
  if (policy == MoePolicy::kGptOss) return ParseGptOssMoe(j, source, out);
  if (policy == MoePolicy::kGemma4) return absl::OkStatus();  // ParseGemma4, with enable_moe_block
  const bool mixtral = policy == MoePolicy::kMixtral;
  // Mixtral names the count num_local_experts; Qwen num_experts, but transformers 5's Qwen3MoeConfig maps
  // that to num_local_experts and saves it so. Both present must agree.
  const char* experts_field =
      mixtral || Find(j, "num_experts") == nullptr ? "num_local_experts" : "num_experts";
  SCORED_ASSIGN_OR_RETURN(c.num_experts, GetPositive(j, experts_field, source));
  if (!mixtral && Find(j, "num_experts") != nullptr && Find(j, "num_local_experts") != nullptr) {
    SCORED_ASSIGN_OR_RETURN(int64_t other, GetPositive(j, "num_local_experts", source));
    if (other != c.num_experts) {
      return Invalid(source, absl::StrCat("fields 'num_experts' (", c.num_experts,
                                          ") and 'num_local_experts' (", other, ") disagree"));
    }
  }
  SCORED_ASSIGN_OR_RETURN(c.num_experts_per_tok, GetPositive(j, "num_experts_per_tok", source));
  if (c.num_experts_per_tok > c.num_experts) {
    return Invalid(source, absl::StrCat("field 'num_experts_per_tok' = ", c.num_experts_per_tok, " exceeds '",
                                        experts_field, "' = ", c.num_experts));
  }
  c.sparse_layers.assign(static_cast<size_t>(c.num_layers), true);
  if (mixtral) {
    c.moe_intermediate_size = c.intermediate_size;
    c.norm_topk_prob = true;
    return absl::OkStatus();
  }
  SCORED_ASSIGN_OR_RETURN(c.moe_intermediate_size, GetPositive(j, "moe_intermediate_size", source));
  if (policy == MoePolicy::kQwen35Moe) {
    c.norm_topk_prob = true;
  } else {
    SCORED_ASSIGN_OR_RETURN(c.norm_topk_prob, GetBool(j, "norm_topk_prob", source, false));
  }
  if (family.moe.shared_expert) {
    SCORED_ASSIGN_OR_RETURN(c.shared_expert_intermediate_size,
                            GetPositive(j, "shared_expert_intermediate_size", source));
  }
  if (policy == MoePolicy::kQwen35Moe) return absl::OkStatus();  // every layer sparse
  SCORED_ASSIGN_OR_RETURN(int64_t step, GetPositive(j, "decoder_sparse_step", source, 1));
  std::vector<bool> mlp_only(static_cast<size_t>(c.num_layers), false);
  if (const Json* list = Find(j, "mlp_only_layers")) {
    if (!list->is_array())
      return json_util::TypeError(source, "mlp_only_layers", "a list of layer indices", *list);
    for (const Json& v : *list) {
      std::optional<int64_t> l = json_util::AsInt(v);
      if (!l.has_value() || *l < 0 || *l >= c.num_layers) {
        return Invalid(source, absl::StrCat("field 'mlp_only_layers' holds ", v.dump(),
                                            ", not a layer index in [0, ", c.num_layers, ")"));
      }
      mlp_only[static_cast<size_t>(*l)] = true;
    }
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    c.sparse_layers[static_cast<size_t>(l)] = !mlp_only[static_cast<size_t>(l)] && (l + 1) % step == 0;
  }
  return absl::OkStatus();
}

// LinearAttentionTraits (Qwen3.5): which layers are Gated DeltaNets, their dimensions, the attention output
// gate, (1 + w) norms (partial_rotary_factor's 0.25 default is the family's PartialRotaryTraits).
absl::Status ParseLinearAttention(const Json& j, const FamilyTraits& family, const std::string& source,
                                  ModelConfig* out) {
  if (!family.linear_attention.enabled) return absl::OkStatus();
  ModelConfig& c = *out;
  c.gemma_norm = true;
  c.attention_output_gate = true;
  for (auto [field, value] : {std::pair{"linear_num_key_heads", &c.linear_num_key_heads},
                              std::pair{"linear_num_value_heads", &c.linear_num_value_heads},
                              std::pair{"linear_key_head_dim", &c.linear_key_head_dim},
                              std::pair{"linear_value_head_dim", &c.linear_value_head_dim},
                              std::pair{"linear_conv_kernel_dim", &c.linear_conv_kernel_dim}}) {
    SCORED_ASSIGN_OR_RETURN(*value, GetPositive(j, field, source));
  }
  if (c.linear_num_value_heads % c.linear_num_key_heads != 0) {
    return Invalid(
        source, absl::StrCat("linear_num_value_heads (", c.linear_num_value_heads,
                             ") is not a multiple of linear_num_key_heads (", c.linear_num_key_heads, ")"));
  }
  const int64_t n = c.num_layers;
  c.linear_attention_layers.assign(static_cast<size_t>(n), false);
  if (const Json* types = Find(j, "layer_types"); types != nullptr && !types->is_null()) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != n) {
      return Invalid(
          source, absl::StrCat("field 'layer_types' must be a list of num_hidden_layers (", n, ") strings"));
    }
    for (int64_t l = 0; l < n; ++l) {
      const Json& t = (*types)[static_cast<size_t>(l)];
      if (t == "linear_attention") {
        c.linear_attention_layers[static_cast<size_t>(l)] = true;
      } else if (t != "full_attention") {
        return Invalid(source, absl::StrCat("unsupported layer_types[", l, "] ", t.dump(),
                                            " (linear_attention or full_attention)"));
      }
    }
    return absl::OkStatus();
  }
  SCORED_ASSIGN_OR_RETURN(int64_t interval, GetPositive(j, "full_attention_interval", source, 4));
  for (int64_t l = 0; l < n; ++l) c.linear_attention_layers[static_cast<size_t>(l)] = (l + 1) % interval != 0;
  return absl::OkStatus();
}

// LatentAttentionTraits (DeepSeek-V3's MLA): the latent ranks and head widths (required: transformers' config
// classes have defaults for them, but a published config always states them, and one without is more likely
// another model than DeepSeek-V3's default shape), rope_interleave (default true, as the config classes).
// head_dim becomes qk_rope_head_dim, which RoPE rotates whole (DeepseekV3Config / Glm4MoeLiteConfig set
// head_dim so).
absl::Status ParseLatentAttention(const Json& j, const std::string& source, ModelConfig* out) {
  ModelConfig& c = *out;
  c.latent_attention = true;
  for (auto [field, value] :
       {std::pair{"kv_lora_rank", &c.kv_lora_rank}, std::pair{"qk_nope_head_dim", &c.qk_nope_head_dim},
        std::pair{"qk_rope_head_dim", &c.qk_rope_head_dim}, std::pair{"v_head_dim", &c.v_head_dim}}) {
    if (Find(j, field) == nullptr) {
      return Invalid(source, absl::StrCat("missing required field '", field, "' (", c.architecture,
                                          "'s multi-head latent attention)"));
    }
    SCORED_ASSIGN_OR_RETURN(*value, GetPositive(j, field, source));
  }
  c.q_lora_rank = 0;  // absent or null: q_proj
  if (Find(j, "q_lora_rank") != nullptr) {
    SCORED_ASSIGN_OR_RETURN(c.q_lora_rank, GetPositive(j, "q_lora_rank", source));
  }
  if (c.qk_rope_head_dim % 2 != 0) {
    return Invalid(source, absl::StrCat("field 'qk_rope_head_dim' must be even, got ", c.qk_rope_head_dim));
  }
  if (c.num_kv_heads != c.num_heads) {
    return Invalid(source,
                   absl::StrCat("num_key_value_heads (", c.num_kv_heads, ") must equal num_attention_heads (",
                                c.num_heads, ") for ", c.architecture, "'s multi-head latent attention"));
  }
  c.head_dim = c.qk_rope_head_dim;
  SCORED_ASSIGN_OR_RETURN(c.rope_interleave, GetBool(j, "rope_interleave", source, true));
  if (c.family->latent_attention.indexer != nullptr) {  // DeepSeek Sparse Attention (family.h)
    if (c.q_lora_rank == 0) {
      return Invalid(source, absl::StrCat("field 'q_lora_rank' is required for ", c.architecture,
                                          " (its attention always projects q through q_a_proj)"));
    }
    c.rope_interleave = true;  // DeepseekV32Attention / GlmMoeDsaAttention: apply_rotary_pos_emb_interleave
    SCORED_ASSIGN_OR_RETURN(c.index_topk, GetPositive(j, "index_topk", source));
  }
  return absl::OkStatus();
}

// The latent attention's score scale (transformers 5.17 DeepseekV3Attention.__init__): qk_head_dim^-0.5,
// times yarn_get_mscale(factor, mscale_all_dim)^2 when the RoPE type is not default and mscale_all_dim is
// non-zero (only yarn is allowed for these families, and only it carries mscale_all_dim).
double LatentAttentionScale(const ModelConfig& c) {
  double scale = std::pow(static_cast<double>(c.qk_nope_head_dim + c.qk_rope_head_dim), -0.5);
  const RopeScaling& r = c.rope_scaling;
  if (r.type != RopeType::kDefault && r.mscale_all_dim != 0.0 && r.factor > 1.0) {
    const double mscale = 0.1 * r.mscale_all_dim * std::log(r.factor) + 1.0;
    scale = scale * mscale * mscale;  // transformers' order of the two products
  }
  return scale;
}

// The Gemma block's fields (GemmaTraits): query_pre_attn_scalar, the soft caps, the embedding scale.
// A soft-cap field: absent, the default; an explicit null, no cap (Find treats null as absent, which would
// give the default); else a positive number.
absl::Status ParseGemmaCap(const Json& j, const char* field, double def, const std::string& source,
                           float* value) {
  double v = def;
  if (j.contains(field) && j.at(field).is_null()) {
    v = 0.0;
  } else if (Find(j, field) != nullptr) {
    SCORED_ASSIGN_OR_RETURN(v, GetDouble(j, field, source));
    if (!(v > 0.0)) return Invalid(source, absl::StrCat("field '", field, "' must be positive or null"));
  }
  *value = static_cast<float>(v);
  return absl::OkStatus();
}

absl::Status ParseGemma4(const Json& j, const std::string& source, ModelConfig* out);

absl::Status ParseGemma(const Json& j, const FamilyTraits& family, const std::string& source,
                        ModelConfig* out) {
  if (!family.gemma.enabled) return absl::OkStatus();
  ModelConfig& c = *out;
  c.sandwich_norms = true;
  c.embedding_scale = static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size)));
  if (family.gemma.gemma4) return ParseGemma4(j, source, out);
  c.gemma_norm = true;
  SCORED_ASSIGN_OR_RETURN(double scalar, GetDouble(j, "query_pre_attn_scalar", source, 256.0));
  if (!(scalar > 0.0)) return Invalid(source, "query_pre_attn_scalar must be positive");
  c.attention_scale = std::pow(scalar, -0.5);  // transformers: query_pre_attn_scalar**-0.5
  SCORED_RETURN_IF_ERROR(ParseGemmaCap(j, "attn_logit_softcapping", family.gemma.attn_softcap_default, source,
                                       &c.attn_logit_softcap));
  SCORED_RETURN_IF_ERROR(ParseGemmaCap(j, "final_logit_softcapping", family.gemma.final_softcap_default,
                                       source, &c.final_logit_softcap));
  SCORED_ASSIGN_OR_RETURN(bool bidirectional, GetBool(j, "use_bidirectional_attention", source, false));
  if (bidirectional) return Invalid(source, "unsupported use_bidirectional_attention: true");
  return absl::OkStatus();
}

// GemmaTraits::gemma4 (transformers 5.17 Gemma4TextConfig.__post_init__, Gemma4TextAttention): the block's
// flags, the full layers' head_dim / kv heads, and the fields of what is not implemented, refused by name.
absl::Status ParseGemma4(const Json& j, const std::string& source, ModelConfig* out) {
  ModelConfig& c = *out;
  c.attention_scale = 1.0;  // Gemma4TextAttention.scaling
  c.value_norm = true;
  c.layer_scalar = true;
  SCORED_RETURN_IF_ERROR(ParseGemmaCap(j, "final_logit_softcapping", 0.0, source, &c.final_logit_softcap));
  if (const Json* b = Find(j, "use_bidirectional_attention"); b != nullptr && *b == "all") {
    return Invalid(source, "unsupported use_bidirectional_attention 'all' (a bidirectional encoder)");
  }
  for (const char* field : {"hidden_size_per_layer_input", "num_kv_shared_layers"}) {
    SCORED_ASSIGN_OR_RETURN(const int64_t v, GetInt(j, field, source, 0));
    if (v != 0) {
      return Invalid(source,
                     absl::StrCat("unsupported ", field, " ", v, " for ", c.architecture,
                                  " (Gemma 4 E2B / E4B's per-layer embeddings and shared K / V are not "
                                  "implemented; 0 expected)"));
    }
  }
  SCORED_ASSIGN_OR_RETURN(const bool moe, GetBool(j, "enable_moe_block", source, false));
  // 26B-A4B: every layer's dense MLP and experts in parallel (ModelConfig::parallel_dense_experts).
  if (moe) {
    SCORED_ASSIGN_OR_RETURN(c.num_experts, GetPositive(j, "num_experts", source));
    SCORED_ASSIGN_OR_RETURN(c.num_experts_per_tok, GetPositive(j, "top_k_experts", source));
    if (c.num_experts_per_tok > c.num_experts) {
      return Invalid(source, absl::StrCat("field 'top_k_experts' = ", c.num_experts_per_tok,
                                          " exceeds 'num_experts' = ", c.num_experts));
    }
    SCORED_ASSIGN_OR_RETURN(c.moe_intermediate_size, GetPositive(j, "moe_intermediate_size", source));
    c.norm_topk_prob = true;  // Gemma4TextRouter: top_k_weights /= their sum
    c.parallel_dense_experts = true;
    c.gemma4_router = true;
    c.sparse_layers.assign(static_cast<size_t>(c.num_layers), true);
  }
  SCORED_ASSIGN_OR_RETURN(c.attention_k_eq_v, GetBool(j, "attention_k_eq_v", source, false));
  // As Gemma4TextConfig: the last layer is full attention whatever layer_types says.
  if (!c.layer_window.empty()) c.layer_window.back() = 0;
  if (!c.layer_local_rope.empty()) c.layer_local_rope.back() = false;
  // The full layers' shape: per_layer_config (what transformers saves) or global_head_dim (default 512) and,
  // under attention_k_eq_v, num_global_key_value_heads.
  SCORED_ASSIGN_OR_RETURN(c.full_head_dim, GetPositive(j, "global_head_dim", source, 512));
  c.full_kv_heads = 0;
  if (c.attention_k_eq_v && Find(j, "num_global_key_value_heads") != nullptr) {
    SCORED_ASSIGN_OR_RETURN(c.full_kv_heads, GetPositive(j, "num_global_key_value_heads", source));
  }
  if (const Json* per_layer = Find(j, "per_layer_config")) {
    if (!per_layer->is_object()) return Invalid(source, "'per_layer_config' must be an object");
    int64_t head_dim = 0, kv_heads = -1, listed = 0, full = 0;
    for (int64_t l = 0; l < c.num_layers; ++l) full += c.LayerWindow(l) == 0 ? 1 : 0;
    for (const auto& item : per_layer->items()) {
      ++listed;
      int64_t l = -1;
      if (!absl::SimpleAtoi(item.key(), &l) || l < 0 || l >= c.num_layers || c.LayerWindow(l) != 0) {
        return Invalid(source, absl::StrCat("per_layer_config key '", item.key(),
                                            "' is not the index of a full_attention layer"));
      }
      const std::string ctx = absl::StrCat(source, " (per_layer_config.", item.key(), ")");
      if (!item.value().is_object()) return Invalid(ctx, "must be an object");
      for (const auto& field : item.value().items()) {
        if (field.key() != "head_dim" && field.key() != "num_key_value_heads") {
          return Invalid(ctx, absl::StrCat("unsupported field '", field.key(), "'"));
        }
      }
      SCORED_ASSIGN_OR_RETURN(const int64_t d, GetPositive(item.value(), "head_dim", ctx, c.head_dim));
      int64_t kv = 0;  // absent: the config's num_key_value_heads
      if (Find(item.value(), "num_key_value_heads") != nullptr) {
        SCORED_ASSIGN_OR_RETURN(kv, GetPositive(item.value(), "num_key_value_heads", ctx));
      }
      if ((head_dim != 0 && d != head_dim) || (kv_heads >= 0 && kv != kv_heads)) {
        return Invalid(ctx, "full_attention layers of different shapes are not supported");
      }
      head_dim = d;
      kv_heads = kv;
    }
    if (listed != 0 && listed != full) {  // one head shape for every full layer (FullHeadDim)
      return Invalid(source, absl::StrCat("per_layer_config lists ", listed, " of the ", full,
                                          " full_attention layers: every one or none is supported"));
    }
    c.full_head_dim = head_dim > 0 ? head_dim : c.head_dim;
    c.full_kv_heads = kv_heads > 0 ? kv_heads : 0;
  }
  if (c.full_head_dim % 2 != 0 || (c.full_kv_heads > 0 && c.num_heads % c.full_kv_heads != 0)) {
    return Invalid(source, absl::StrCat("full_attention layers: head_dim ", c.full_head_dim, " and ",
                                        c.full_kv_heads, " kv heads do not fit ", c.num_heads, " heads"));
  }
  return absl::OkStatus();
}

// TextOnlyTraits: the language model's config: `text_config`, plus the top level's other fields (model_type,
// architectures, quantization_config, torch_dtype, token ids, ...) where text_config lacks them; the
// top level's model_type wins (it names the family).
absl::StatusOr<Json> TextConfig(const Json& j, const TextOnlyTraits& traits, const std::string& architecture,
                                const std::string& source) {
  const Json* text = Find(j, "text_config");
  if (text == nullptr || !text->is_object()) {
    return Invalid(source, "field 'text_config' must be an object (the language model's config)");
  }
  if (traits.text_model_types[0] != nullptr) {  // a wrapper of several language models: only these
    std::vector<std::string> allowed;
    for (const char* const* t = traits.text_model_types; *t != nullptr; ++t) allowed.emplace_back(*t);
    const Json* type = Find(*text, "model_type");
    const std::string got = type != nullptr && type->is_string() ? type->get<std::string>() : "";
    if (std::find(allowed.begin(), allowed.end(), got) == allowed.end()) {
      return Invalid(source, absl::StrCat(architecture, " is supported with a text_config of model_type ",
                                          absl::StrJoin(allowed, " or "), ", not '", got,
                                          got.empty() ? "' (none given)" : "'"));
    }
  }
  Json merged = *text;
  merged.erase("model_type");
  for (const auto& item : j.items()) {
    if (item.key() == "text_config" || item.key() == "vision_config") continue;
    if (item.key() == "model_type" || merged.find(item.key()) == merged.end())
      merged[item.key()] = item.value();
  }
  return merged;
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source_name) {
  const std::string source(source_name);
  SCORED_ASSIGN_OR_RETURN(
      Json j, json_util::ParseObject(absl::string_view(json_text.data(), json_text.size()), source));
  ModelConfig c;

  const Json* archs = Find(j, "architectures");
  if (archs == nullptr || !archs->is_array() || archs->size() != 1 || !(*archs)[0].is_string()) {
    return Invalid(source, "field 'architectures' must be a list of one string");
  }
  c.architecture = (*archs)[0].get<std::string>();
  const FamilyTraits* family = FindFamily(c.architecture);
  if (family == nullptr) {
    return Invalid(source, absl::StrCat("unsupported architecture '", c.architecture,
                                        "' (supported: ", SupportedArchitectures(), ")"));
  }
  c.family = family;
  if (family->text_only.enabled) {
    SCORED_ASSIGN_OR_RETURN(j, TextConfig(j, family->text_only, c.architecture, source));
  }
  if (family->config_defaults != nullptr) {
    SCORED_ASSIGN_OR_RETURN(Json defaults,
                            json_util::ParseObject(family->config_defaults, "the family's config defaults"));
    for (const auto& item : defaults.items()) {
      // A default RoPE (gpt-oss's YaRN and theta) stands only where config.json describes none, in neither
      // form: a rope_parameters of the file's own replaces the default scaling, and its rope_theta the
      // default theta (which the top level would otherwise override: ParseRope).
      const Json* rope_params = Find(j, "rope_parameters");
      if (item.key() == "rope_scaling" && rope_params != nullptr) continue;
      if (item.key() == "rope_parameters" && Find(j, "rope_scaling") != nullptr) continue;
      if (item.key() == "rope_theta" && rope_params != nullptr && rope_params->is_object() &&
          Find(*rope_params, "rope_theta") != nullptr) {
        continue;
      }
      if (Find(j, item.key()) == nullptr) j[item.key()] = item.value();
    }
  }
  SCORED_ASSIGN_OR_RETURN(c.model_type, GetString(j, "model_type", source, std::string(family->model_type)));
  if (c.model_type != family->model_type) {
    return Invalid(source, absl::StrCat("model_type '", c.model_type, "' does not match architecture '",
                                        c.architecture, "' (expected '", family->model_type, "')"));
  }

  if (family->gemma.enabled) {
    // transformers' Gemma 2 / 3 read hidden_activation (published configs may carry both).
    const char* field = Find(j, "hidden_activation") != nullptr ? "hidden_activation" : "hidden_act";
    SCORED_ASSIGN_OR_RETURN(std::string act, GetString(j, field, source, std::string("gelu_pytorch_tanh")));
    if (act != "gelu_pytorch_tanh") {
      return Invalid(source, absl::StrCat("unsupported ", field, " '", act, "' (only gelu_pytorch_tanh)"));
    }
    c.mlp_activation = MlpActivation::kGeluTanh;
  } else {
    SCORED_ASSIGN_OR_RETURN(std::string act, GetString(j, "hidden_act", source, std::string("silu")));
    if (act != "silu") return Invalid(source, absl::StrCat("unsupported hidden_act '", act, "' (only silu)"));
  }

  SCORED_ASSIGN_OR_RETURN(c.hidden_size, GetPositive(j, "hidden_size", source));
  SCORED_ASSIGN_OR_RETURN(c.intermediate_size, GetPositive(j, "intermediate_size", source));
  SCORED_ASSIGN_OR_RETURN(c.num_layers, GetPositive(j, "num_hidden_layers", source));
  // Layers are allocated per index before any tensor is read: bound them separately.
  constexpr int64_t kMaxLayers = 4096;
  if (c.num_layers > kMaxLayers) {
    return Invalid(source, absl::StrCat("num_hidden_layers = ", c.num_layers, " exceeds the supported limit ",
                                        kMaxLayers));
  }
  SCORED_ASSIGN_OR_RETURN(c.num_heads, GetPositive(j, "num_attention_heads", source));
  SCORED_ASSIGN_OR_RETURN(c.num_kv_heads, GetPositive(j, "num_key_value_heads", source, c.num_heads));
  SCORED_ASSIGN_OR_RETURN(c.vocab_size, GetPositive(j, "vocab_size", source));
  if (c.num_heads % c.num_kv_heads != 0) {
    return Invalid(source, absl::StrCat("num_attention_heads (", c.num_heads,
                                        ") is not a multiple of num_key_value_heads (", c.num_kv_heads, ")"));
  }
  if (family->latent_attention.enabled) {  // head_dim is qk_rope_head_dim, whatever config.json says
    SCORED_RETURN_IF_ERROR(ParseLatentAttention(j, source, &c));
  } else if (Find(j, "head_dim") != nullptr) {
    SCORED_ASSIGN_OR_RETURN(c.head_dim, GetPositive(j, "head_dim", source));
  } else {
    if (c.hidden_size % c.num_heads != 0) {
      return Invalid(
          source, absl::StrCat("hidden_size (", c.hidden_size, ") is not a multiple of num_attention_heads (",
                               c.num_heads, ") and no head_dim is given"));
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) return Invalid(source, absl::StrCat("head_dim must be even, got ", c.head_dim));
  SCORED_ASSIGN_OR_RETURN(c.max_position_embeddings, GetPositive(j, "max_position_embeddings", source,
                                                                 family->default_max_position_embeddings));
  SCORED_ASSIGN_OR_RETURN(c.rms_norm_eps, GetDouble(j, "rms_norm_eps", source, 1e-6));
  if (!(c.rms_norm_eps > 0.0)) return Invalid(source, "rms_norm_eps must be positive");
  SCORED_ASSIGN_OR_RETURN(c.tie_word_embeddings,
                          GetBool(j, "tie_word_embeddings", source, family->tie_word_embeddings_default));

  SCORED_RETURN_IF_ERROR(ParseRope(j, *family, source, &c));
  if (c.latent_attention) c.attention_scale = LatentAttentionScale(c);
  SCORED_RETURN_IF_ERROR(ApplyFamilyPolicies(j, *family, source, &c));
  SCORED_RETURN_IF_ERROR(ParseMoe(j, *family, source, &c));
  SCORED_RETURN_IF_ERROR(ParseGemma(j, *family, source, &c));
  SCORED_RETURN_IF_ERROR(ParseLinearAttention(j, *family, source, &c));
  c.attention_sinks = family->attention_sinks != nullptr;

  SCORED_ASSIGN_OR_RETURN(c.bos_token_id, GetTokenId(j, "bos_token_id", source));
  SCORED_ASSIGN_OR_RETURN(c.eos_token_id, GetTokenId(j, "eos_token_id", source));

  if (Find(j, "torch_dtype") != nullptr) {
    SCORED_ASSIGN_OR_RETURN(c.torch_dtype, GetString(j, "torch_dtype", source));
  } else if (Find(j, "dtype") != nullptr) {
    SCORED_ASSIGN_OR_RETURN(c.torch_dtype, GetString(j, "dtype", source));
  } else {
    c.torch_dtype = "float32";
  }
  static const std::set<std::string> kDtypes = {"float32", "bfloat16", "float16"};
  if (kDtypes.count(c.torch_dtype) == 0) {
    return Invalid(source, absl::StrCat("unsupported torch_dtype '", c.torch_dtype,
                                        "' (supported: float32, bfloat16, float16)"));
  }

  const Json* q = Find(j, "quantization_config");
  if (q == nullptr) q = Find(j, "compression_config");
  if (q != nullptr) {
    if (!q->is_object()) return Invalid(source, "'quantization_config' must be an object");
    c.has_quantization_config = true;
    c.quantization_config_json = q->dump();
  }
  return c;
}

std::string DescribeRope(const ModelConfig& config) {
  const RopeScaling& s = config.rope_scaling;
  std::string out = absl::StrCat("rope_theta ", config.rope_theta);
  if (s.type == RopeType::kDefault) return absl::StrCat(out, ", no rope_scaling");
  absl::StrAppend(&out, ", rope_scaling ", RopeTypeName(s.type));
  if (s.type != RopeType::kLongrope || s.factor > 0) absl::StrAppend(&out, " factor ", s.factor);
  if (s.type != RopeType::kLinear) {
    absl::StrAppend(&out, " (original ", s.original_max_position_embeddings, ")");
  }
  if (s.type == RopeType::kYarn) {
    absl::StrAppend(&out, " beta_fast ", s.beta_fast, " beta_slow ", s.beta_slow,
                    s.truncate ? "" : " truncate false", ", cos/sin x ", s.attention_factor);
  }
  return out;
}

absl::StatusOr<int64_t> ServedContextLength(const ModelConfig& config, int64_t max_seq_len,
                                            bool allow_long_context) {
  const int64_t trained = config.max_position_embeddings;
  if (config.index_topk > 0) {  // DeepSeek Sparse Attention: dense only up to index_topk keys per query
    const int64_t dense = config.index_topk + 1;
    if (max_seq_len > dense) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--max_seq_len ", max_seq_len, " is longer than ", config.architecture,
          "'s sparse attention computes exactly here: its indexer keeps index_topk (", config.index_topk,
          ") keys per query, so windows of up to ", dense,
          " ids (the last is only a target) are dense attention, and longer ones need the indexer's top-k "
          "selection, which is not implemented"));
    }
    if (max_seq_len <= 0) return std::min(trained, dense);
  }
  if (max_seq_len <= 0) return trained;
  if (max_seq_len > trained + 1 && !allow_long_context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_seq_len ", max_seq_len,
        " is longer than the model's trained context: max_position_embeddings ", trained, " (",
        DescribeRope(config), "), so at most ", trained + 1,
        " ids (the last is only a target). Positions past it are extrapolation and their log-probs are not "
        "meaningful; pass --allow_long_context to serve them anyway"));
  }
  return max_seq_len;
}

// Why `model_dir` holds no config.json, in the words a user needs: a file (GGUF, llama2.c) or a folder of
// GGUF files is not a Hugging Face folder; a missing path may be a hub id.
absl::Status NoConfigJson(const std::string& model_dir, const std::string& path) {
  constexpr char kWant[] = "a model is a Hugging Face folder (config.json and *.safetensors)";
  std::error_code ec;
  const std::filesystem::path dir(model_dir);
  if (std::filesystem::is_regular_file(dir, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(model_dir, " is a file: ", kWant,
                     "; GGUF and llama2.c checkpoint files are not read (convert "
                     "them to a Hugging Face folder first)"));
  }
  if (!std::filesystem::exists(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(model_dir, ": no such folder (", kWant,
                                            "; a hub id such as org/name is not downloaded: fetch it into a "
                                            "folder first)"));
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".gguf") {
      return absl::InvalidArgumentError(absl::StrCat(model_dir, " holds ", entry.path().filename().string(),
                                                     " but no config.json: ", kWant,
                                                     "; GGUF files are not read"));
    }
  }
  return absl::NotFoundError(absl::StrCat(path, ": cannot open (", kWant, ")"));
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return NoConfigJson(model_dir, path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return ParseModelConfig(ss.str(), path);
}

absl::Status CheckBaselineVocabulary(int64_t model_vocab_size, int64_t reference_vocab_size) {
  if (model_vocab_size == reference_vocab_size) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--reference_model: the vocabulary sizes differ: the model has ", model_vocab_size,
                   " embedding rows (config vocab_size), the reference model ", reference_vocab_size));
}

}  // namespace scored

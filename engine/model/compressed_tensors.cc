#include "engine/model/compressed_tensors.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/base/json_util.h"
#include "engine/base/status_macros.h"

namespace scored {
namespace {

using json_util::Find;
using json_util::Json;

// One `weights` / `input_activations` entry.
struct QuantArgs {
  int num_bits = 8;
  std::string type = "int";
  bool symmetric = true;
  std::string strategy;  // "" until defaulted
  int64_t group_size = 0;
  int64_t block_rows = 0, block_cols = 0;
  std::string actorder;  // "", "group", "weight"
  std::string dynamic;   // "false", "true", "local"
};

absl::Status Unsupported(absl::string_view source, absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": quantization_config ", where, ": unsupported ", what));
}

absl::StatusOr<QuantArgs> ParseArgs(const Json& j, absl::string_view ctx) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(ctx, ": must be an object"));
  QuantArgs a;
  SCORED_ASSIGN_OR_RETURN(int64_t bits, json_util::GetInt(j, "num_bits", ctx, 8));
  if (bits < 1 || bits > 16) return absl::InvalidArgumentError(absl::StrCat(ctx, ": num_bits ", bits));
  a.num_bits = static_cast<int>(bits);
  SCORED_ASSIGN_OR_RETURN(a.type, json_util::GetString(j, "type", ctx, std::string("int")));
  SCORED_ASSIGN_OR_RETURN(a.symmetric, json_util::GetBool(j, "symmetric", ctx, true));
  SCORED_ASSIGN_OR_RETURN(a.strategy, json_util::GetString(j, "strategy", ctx, std::string()));
  SCORED_ASSIGN_OR_RETURN(a.group_size, json_util::GetInt(j, "group_size", ctx, 0));
  if (const Json* bs = Find(j, "block_structure")) {
    std::optional<int64_t> r, c;
    if (bs->is_array() && bs->size() == 2) {
      r = json_util::AsInt((*bs)[0]);
      c = json_util::AsInt((*bs)[1]);
    } else if (bs->is_string()) {  // legacy "128x128"
      std::vector<std::string> parts = absl::StrSplit(bs->get<std::string>(), 'x');
      int64_t rv = 0, cv = 0;
      if (parts.size() == 2 && absl::SimpleAtoi(parts[0], &rv) && absl::SimpleAtoi(parts[1], &cv)) {
        r = rv;
        c = cv;
      }
    }
    if (!r || !c || *r <= 0 || *c <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(ctx, ": bad block_structure ", bs->dump()));
    }
    a.block_rows = *r;
    a.block_cols = *c;
  }
  if (const Json* ao = Find(j, "actorder")) {
    if (ao->is_boolean()) {
      a.actorder = ao->get<bool>() ? "group" : "";
    } else if (ao->is_string()) {
      const std::string s = ao->get<std::string>();
      if (s == "group" || s == "dynamic") {
        a.actorder = "group";
      } else if (s == "weight" || s == "static") {
        a.actorder = "weight";
      } else {
        return absl::InvalidArgumentError(absl::StrCat(ctx, ": unsupported actorder '", s, "'"));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(ctx, ": bad actorder ", ao->dump()));
    }
  }
  a.dynamic = "false";
  if (const Json* d = Find(j, "dynamic")) {
    if (d->is_boolean()) {
      a.dynamic = d->get<bool>() ? "true" : "false";
    } else if (d->is_string() && d->get<std::string>() == "local") {
      a.dynamic = "local";
    } else {
      return absl::InvalidArgumentError(absl::StrCat(ctx, ": bad dynamic ", d->dump()));
    }
  }
  // Strategy defaults as compressed-tensors infers them.
  if (a.strategy.empty()) {
    if (a.group_size > 0) {
      a.strategy = "group";
    } else if (a.group_size == -1) {
      a.strategy = "channel";
    } else if (a.block_rows > 0) {
      a.strategy = "block";
    } else {
      a.strategy = "tensor";
    }
  }
  if ((a.strategy == "group" || a.strategy == "tensor_group") && a.group_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(ctx, ": strategy ", a.strategy, " needs group_size > 0"));
  }
  if (a.strategy == "block" && a.block_rows <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(ctx, ": strategy block needs block_structure"));
  }
  return a;
}

// kv_cache_scheme: only static per-tensor symmetric FP8 E4M3 (llm-compressor's usual FP8 KV cache: one
// k_scale and v_scale per attention layer); anything else is refused naming the field.
absl::StatusOr<bool> ParseKvCacheScheme(const Json& j, absl::string_view source) {
  const std::string ctx = absl::StrCat(source, ": quantization_config kv_cache_scheme");
  SCORED_ASSIGN_OR_RETURN(QuantArgs a, ParseArgs(j, ctx));
  if (a.type != "float" || a.num_bits != 8 || a.strategy != "tensor" || a.dynamic != "false" ||
      !a.symmetric) {
    return Unsupported(
        source, "kv_cache_scheme",
        absl::StrCat("KV-cache quantization (type ", a.type, ", ", a.num_bits, " bits, strategy ", a.strategy,
                     ", dynamic ", a.dynamic, a.symmetric ? "" : ", asymmetric",
                     "): only static per-tensor symmetric FP8 (float, 8 bits) is implemented"));
  }
  return true;
}

// Sets the activation fields of `s` (weights already resolved) from `input_activations`, or fails naming
// the field and its values.
absl::Status ResolveInputActivations(const QuantArgs& w, const QuantArgs& in, const std::string& format,
                                     absl::string_view source, const std::string& where, ModuleScheme* s) {
  const std::string desc =
      absl::StrCat("input_activations (type ", in.type, ", ", in.num_bits, " bits, strategy ", in.strategy,
                   ", dynamic ", in.dynamic, in.symmetric ? "" : ", asymmetric", ")");
  const bool fp8_weights = s->format == WeightFormat::kFloatQuantized;
  const bool int8_weights = s->format == WeightFormat::kNaiveQuantized && s->num_bits == 8;
  // int4 (any int below 8 bits) weights with 8-bit activations: W4AFP8 / W4A8, stored int- or pack-quantized.
  const bool narrow_int_weights =
      (s->format == WeightFormat::kNaiveQuantized || s->format == WeightFormat::kPackQuantized) &&
      s->num_bits < 8;
  if (in.dynamic == "true" && in.type == "float" && in.num_bits == 8 && in.symmetric &&
      (in.strategy == "token" || (in.strategy == "group" && fp8_weights)) &&
      (fp8_weights || narrow_int_weights)) {
    s->w8a8_dynamic_fp8 = true;
    s->act_group_size = in.strategy == "group" ? in.group_size : 0;
  } else if (in.dynamic == "true" && in.type == "int" && in.num_bits == 8 && in.strategy == "token" &&
             (int8_weights || narrow_int_weights)) {
    s->w8a8_dynamic_int8 = true;
    s->act_symmetric = in.symmetric;
  } else if (s->format == WeightFormat::kNvfp4PackQuantized && in.type == "float" && in.num_bits == 4 &&
             in.strategy == "tensor_group") {
    s->w4a4_run_weight_only = true;
  } else if (in.dynamic == "false" && in.strategy == "tensor" && in.num_bits == 8 &&
             ((in.type == "float" && in.symmetric && fp8_weights) || (in.type == "int" && int8_weights))) {
    // Static activation scales: `input_scale` (and `input_zero_point`) per linear, calibrated at export.
    s->static_input_fp8 = in.type == "float";
    s->static_input_int8 = in.type == "int";
    s->act_symmetric = in.symmetric;
  } else if (in.dynamic == "false") {
    return Unsupported(source, where,
                       absl::StrCat("static ", desc, " with ", format, " weights of type ", w.type, " with ",
                                    w.num_bits, " bits"));
  } else if (in.num_bits == 8 && (in.strategy == "token" || in.strategy == "group")) {
    return Unsupported(
        source, where,
        absl::StrCat(desc, " with ", format, " weights of type ", w.type, " with ", w.num_bits, " bits"));
  } else {
    return Unsupported(source, where, desc);
  }
  return absl::OkStatus();
}

// Builds and validates the scheme of one group.
absl::StatusOr<ModuleScheme> BuildScheme(const std::string& group, const std::string& format,
                                         const std::optional<QuantArgs>& w,
                                         const std::optional<QuantArgs>& in, absl::string_view source) {
  const std::string where = absl::StrCat("group '", group, "'");
  ModuleScheme s;
  s.group = group;
  s.format_name = format;
  if (format == "dense") {
    return s;
  }
  if (!w.has_value())
    return Unsupported(source, where, absl::StrCat("format '", format, "' without weights"));
  s.quantized = true;
  s.num_bits = w->num_bits;
  s.symmetric = w->symmetric;
  s.group_size = w->group_size;
  s.block_rows = w->block_rows;
  s.block_cols = w->block_cols;
  if (w->dynamic != "false") return Unsupported(source, where, "dynamic weight quantization");
  if (w->actorder == "group") {
    if (w->strategy != "group") return Unsupported(source, where, "actorder group without group strategy");
    s.actorder_group = true;
  }
  auto strategy_of = [&](const std::string& st,
                         std::initializer_list<const char*> allowed) -> absl::StatusOr<QuantStrategy> {
    bool ok = false;
    for (const char* a : allowed) ok = ok || st == a;
    if (!ok) return Unsupported(source, where, absl::StrCat("weight strategy '", st, "' for ", format));
    if (st == "tensor") return QuantStrategy::kTensor;
    if (st == "channel") return QuantStrategy::kChannel;
    if (st == "block") return QuantStrategy::kBlock;
    return QuantStrategy::kGroup;  // group, tensor_group
  };

  if (format == "pack-quantized") {
    if (w->type != "int" || w->num_bits < 2 || w->num_bits > 8) {
      return Unsupported(
          source, where,
          absl::StrCat("pack-quantized weights of type ", w->type, " with ", w->num_bits, " bits"));
    }
    s.format = WeightFormat::kPackQuantized;
    SCORED_ASSIGN_OR_RETURN(s.strategy, strategy_of(w->strategy, {"tensor", "channel", "group"}));
    if (!w->symmetric && s.strategy == QuantStrategy::kTensor) {
      return Unsupported(source, where, "asymmetric tensor-strategy pack-quantized weights");
    }
  } else if (format == "nvfp4-pack-quantized") {
    if (w->type != "float" || w->num_bits != 4 || w->strategy != "tensor_group" || w->group_size != 16 ||
        !w->symmetric) {
      return Unsupported(source, where,
                         "nvfp4-pack-quantized weights other than float 4-bit tensor_group 16");
    }
    s.format = WeightFormat::kNvfp4PackQuantized;
    s.strategy = QuantStrategy::kGroup;
  } else if (format == "mxfp4-pack-quantized") {
    // compressed-tensors' MXFP4 compressor: FP4 E2M1 values packed as nvfp4, one E8M0 exponent per 32.
    if (w->type != "float" || w->num_bits != 4 || w->strategy != "group" || w->group_size != 32 ||
        !w->symmetric) {
      return Unsupported(source, where,
                         "mxfp4-pack-quantized weights other than float 4-bit symmetric group 32");
    }
    if (in.has_value()) {
      // MXFP4 (W4A4) quantizes every activation to FP4 with its own E8M0 scale per 32 in the library's
      // forward; scored has no such activation path and does not silently run it weight-only.
      return Unsupported(source, absl::StrCat(where, " input_activations"),
                         absl::StrCat("activation quantization with mxfp4-pack-quantized weights (type ",
                                      in->type, ", ", in->num_bits, " bits, strategy ", in->strategy,
                                      "): only MXFP4A16 (no input_activations) is supported"));
    }
    s.format = WeightFormat::kMxfp4PackQuantized;
    s.strategy = QuantStrategy::kGroup;
  } else if (format == "float-quantized" || format == "naive-quantized" || format == "int-quantized") {
    // One compressor in compressed-tensors: `weight` stored in the quantized dtype, decoded by the
    // weights' type (FP8 E4M3 or int8) whatever the format name says.
    if (w->type == "float" && w->num_bits == 8 && w->symmetric) {
      s.format = WeightFormat::kFloatQuantized;
      SCORED_ASSIGN_OR_RETURN(s.strategy, strategy_of(w->strategy, {"tensor", "channel", "block"}));
    } else if (w->type == "int" && w->num_bits >= 2 && w->num_bits <= 8) {
      // int-quantized stores one value per int8 whatever num_bits (llm-compressor's W4AFP8 / W4A8 write
      // int4 weights this way); the decode is the same.
      s.format = WeightFormat::kNaiveQuantized;
      SCORED_ASSIGN_OR_RETURN(s.strategy, strategy_of(w->strategy, {"tensor", "channel", "group"}));
    } else {
      return Unsupported(source, where,
                         absl::StrCat(format, " weights of type ", w->type, " with ", w->num_bits, " bits",
                                      w->symmetric ? "" : " (asymmetric)"));
    }
  } else {
    return Unsupported(source, where, absl::StrCat("format '", format, "'"));
  }
  if (s.actorder_group && s.format != WeightFormat::kPackQuantized) {
    return Unsupported(source, where, absl::StrCat("actorder group with ", format));
  }

  if (in.has_value()) SCORED_RETURN_IF_ERROR(ResolveInputActivations(*w, *in, format, source, where, &s));
  return s;
}

// compressed-tensors matches "re:" targets with Python's re.match (anchored at the start). PCRE2 with a
// match limit instead of std::regex: a hostile pattern such as "(.*.*)*X" backtracks for minutes in a
// backtracking engine; here it stops after kRegexMatchLimit steps with an error naming the target.
constexpr uint32_t kRegexMatchLimit = 1000000;

bool NameMatches(const std::string& name, const std::string& target, absl::Status* error) {
  if (!absl::StartsWith(target, "re:")) return name == target;
  const std::string pattern = target.substr(3);
  int code = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                 PCRE2_ANCHORED | PCRE2_UTF, &code, &offset, nullptr);
  if (re == nullptr) {
    *error = absl::InvalidArgumentError(absl::StrCat("quantization_config: target '", target,
                                                     "' is not a valid regex (at offset ", offset, ")"));
    return false;
  }
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_set_match_limit(context, kRegexMatchLimit);
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(re, nullptr);
  const int rc =
      pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(name.data()), name.size(), 0, 0, match, context);
  pcre2_match_data_free(match);
  pcre2_match_context_free(context);
  pcre2_code_free(re);
  if (rc == PCRE2_ERROR_MATCHLIMIT) {
    *error = absl::InvalidArgumentError(absl::StrCat("quantization_config: target '", target,
                                                     "' is too expensive to match against '", name, "'"));
    return false;
  }
  return rc >= 0;
}

bool ClassMatches(const std::string& target) { return target == "Linear" || target == "Module"; }

// A list of strings at `key` of `j` (absent: empty).
absl::Status StringList(const Json& j, const char* key, const std::string& ctx,
                        std::vector<std::string>* out) {
  const Json* v = Find(j, key);
  if (v == nullptr || v->is_null()) return absl::OkStatus();
  if (!v->is_array()) return json_util::TypeError(ctx, key, "a list of strings", *v);
  for (const Json& e : *v) {
    if (!e.is_string()) return json_util::TypeError(ctx, key, "a list of strings", *v);
    out->push_back(e.get<std::string>());
  }
  return absl::OkStatus();
}

// sparsity_config: "dense" (nothing to do) or "sparse-24-bitmask" with structure 2:4; anything else fails
// naming the field.
absl::Status ParseSparsity(const Json& sp, const std::string& source,
                           CompressedTensorsConfig::Sparsity* out) {
  if (!sp.is_object()) return json_util::TypeError(source, "sparsity_config", "an object", sp);
  std::string fmt = "?";
  if (const Json* f = Find(sp, "format"); f != nullptr && f->is_string()) fmt = f->get<std::string>();
  if (fmt == "dense") return absl::OkStatus();
  if (fmt != "sparse-24-bitmask") {
    return Unsupported(source, "sparsity_config",
                       absl::StrCat("format '", fmt, "' (only sparse-24-bitmask)"));
  }
  std::string structure = "unstructured";  // compressed-tensors' default for a missing / null structure
  if (const Json* st = Find(sp, "sparsity_structure"); st != nullptr && st->is_string()) {
    structure = st->get<std::string>();
  }
  if (structure != "2:4") {
    return Unsupported(source, "sparsity_config sparsity_structure",
                       absl::StrCat("'", structure, "' with sparse-24-bitmask (only 2:4)"));
  }
  out->sparse24 = true;
  SCORED_RETURN_IF_ERROR(StringList(sp, "targets", source + ": sparsity_config", &out->targets));
  SCORED_RETURN_IF_ERROR(StringList(sp, "ignore", source + ": sparsity_config", &out->ignore));
  if (out->targets.empty()) {
    return Unsupported(source, "sparsity_config", "sparse-24-bitmask without targets");
  }
  return absl::OkStatus();
}

}  // namespace

bool TargetMatches(const std::string& module, const std::string& target, absl::Status* error) {
  return NameMatches(module, target, error) || (!module.empty() && ClassMatches(target));
}

absl::StatusOr<CompressedTensorsConfig> ParseCompressedTensorsConfig(std::string_view json_text,
                                                                     std::string_view source_name) {
  const std::string source(source_name);
  SCORED_ASSIGN_OR_RETURN(
      Json j, json_util::ParseObject(absl::string_view(json_text.data(), json_text.size()), source));
  CompressedTensorsConfig c;
  SCORED_ASSIGN_OR_RETURN(std::string method, json_util::GetString(j, "quant_method", source, std::string()));
  if (method != "compressed-tensors") {
    return absl::InvalidArgumentError(absl::StrCat(source, ": unsupported quantization_config quant_method '",
                                                   method, "' (only compressed-tensors)"));
  }
  // Empty objects (llm-compressor writes "sparsity_config": {}) mean "none".
  if (const Json* sp = Find(j, "sparsity_config"); sp != nullptr && !(sp->is_object() && sp->empty())) {
    SCORED_RETURN_IF_ERROR(ParseSparsity(*sp, source, &c.sparsity));
  }
  if (const Json* tc = Find(j, "transform_config"); tc != nullptr && tc->is_object() && !tc->empty()) {
    SCORED_ASSIGN_OR_RETURN(c.transforms, ParseTransformConfig(tc->dump(), source));
  } else if (tc != nullptr && !tc->is_null() && !tc->is_object()) {
    return json_util::TypeError(source, "transform_config", "an object", *tc);
  }
  if (const Json* kv = Find(j, "kv_cache_scheme"); kv != nullptr && !kv->is_null()) {
    SCORED_ASSIGN_OR_RETURN(c.kv_cache_fp8, ParseKvCacheScheme(*kv, source));
  }
  SCORED_ASSIGN_OR_RETURN(c.quantization_status,
                          json_util::GetString(j, "quantization_status", source, std::string("compressed")));
  if (c.quantization_status != "compressed") {
    return Unsupported(source, "quantization_status",
                       absl::StrCat("'", c.quantization_status, "' (only compressed)"));
  }
  SCORED_ASSIGN_OR_RETURN(c.format, json_util::GetString(j, "format", source, std::string()));
  if (const Json* ig = Find(j, "ignore")) {
    if (!ig->is_array()) return json_util::TypeError(source, "ignore", "a list of strings", *ig);
    for (const Json& e : *ig) {
      if (!e.is_string()) return json_util::TypeError(source, "ignore", "a list of strings", *ig);
      c.ignore.push_back(e.get<std::string>());
    }
  }
  const Json* groups = Find(j, "config_groups");
  if (groups != nullptr && !groups->is_object()) {
    return json_util::TypeError(source, "config_groups", "an object", *groups);
  }
  if (groups != nullptr) {
    for (auto it = groups->begin(); it != groups->end(); ++it) {
      const std::string ctx = absl::StrCat(source, ": quantization_config group '", it.key(), "'");
      const Json& g = it.value();
      if (!g.is_object()) return absl::InvalidArgumentError(absl::StrCat(ctx, ": must be an object"));
      CompressedTensorsConfig::Group group;
      group.name = it.key();
      const Json* targets = Find(g, "targets");
      if (targets == nullptr || !targets->is_array()) {
        return absl::InvalidArgumentError(absl::StrCat(ctx, ": 'targets' must be a list"));
      }
      for (const Json& t : *targets) {
        if (!t.is_string()) return absl::InvalidArgumentError(absl::StrCat(ctx, ": non-string target"));
        group.targets.push_back(t.get<std::string>());
      }
      std::optional<QuantArgs> w, in;
      if (const Json* wj = Find(g, "weights")) {
        SCORED_ASSIGN_OR_RETURN(w, ParseArgs(*wj, absl::StrCat(ctx, " weights")));
      }
      if (const Json* ij = Find(g, "input_activations")) {
        SCORED_ASSIGN_OR_RETURN(in, ParseArgs(*ij, absl::StrCat(ctx, " input_activations")));
      }
      if (Find(g, "output_activations") != nullptr) {
        return Unsupported(source, absl::StrCat("group '", it.key(), "'"), "output activation quantization");
      }
      std::string format = c.format;
      if (const Json* gf = Find(g, "format")) {
        if (!gf->is_string()) return absl::InvalidArgumentError(absl::StrCat(ctx, ": non-string format"));
        if (c.format.empty() || c.format == "mixed-precision") format = gf->get<std::string>();
      }
      if (format.empty() || format == "mixed-precision") {
        return absl::InvalidArgumentError(
            absl::StrCat(ctx, ": no format (top-level format '", c.format, "' needs a per-group 'format')"));
      }
      SCORED_ASSIGN_OR_RETURN(group.scheme, BuildScheme(group.name, format, w, in, source));
      c.groups.push_back(std::move(group));
    }
  }
  // Reject bad regexes now rather than at the first module.
  absl::Status regex_error;
  for (const auto& g : c.groups) {
    for (const auto& t : g.targets) NameMatches("", t, &regex_error);
  }
  for (const auto& t : c.ignore) NameMatches("", t, &regex_error);
  for (const auto& t : c.sparsity.targets) NameMatches("", t, &regex_error);
  for (const auto& t : c.sparsity.ignore) NameMatches("", t, &regex_error);
  if (!regex_error.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", regex_error.message()));
  }
  return c;
}

absl::StatusOr<ModuleScheme> ResolveModuleScheme(const CompressedTensorsConfig& config,
                                                 const std::string& module) {
  absl::Status error;
  for (const std::string& t : config.ignore) {
    if (NameMatches(module, t, &error) || ClassMatches(t)) return ModuleScheme();
  }
  SCORED_RETURN_IF_ERROR(error);
  // target -> group (a later group naming the same target replaces an earlier one).
  std::map<std::string, size_t> target_group;
  for (size_t i = 0; i < config.groups.size(); ++i) {
    for (const std::string& t : config.groups[i].targets) target_group[t] = i;
  }
  std::vector<std::string> targets;
  for (const auto& [t, g] : target_group) targets.push_back(t);
  std::stable_sort(targets.begin(), targets.end(), [](const std::string& a, const std::string& b) {
    const bool ra = a.find("re:") != std::string::npos, rb = b.find("re:") != std::string::npos;
    return ra != rb ? !ra : a < b;
  });
  for (const std::string& t : targets) {
    if (NameMatches(module, t, &error)) return config.groups[target_group[t]].scheme;
  }
  SCORED_RETURN_IF_ERROR(error);
  for (const std::string& t : targets) {
    if (ClassMatches(t)) return config.groups[target_group[t]].scheme;
  }
  return ModuleScheme();
}

}  // namespace scored

// transform_config parsing and resolution. Contract: transform_config.h.
#include "engine/model/transform_config.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/json_util.h"
#include "engine/base/status_macros.h"
#include "engine/model/compressed_tensors.h"

namespace scored {
namespace {

using json_util::Find;
using json_util::Json;

// A list of strings, or one string (compressed-tensors wraps a singleton).
absl::StatusOr<std::vector<std::string>> StringList(const Json& j, const std::string& key,
                                                    const std::string& ctx) {
  std::vector<std::string> out;
  const Json* v = Find(j, key);
  if (v == nullptr || v->is_null()) return out;
  if (v->is_string()) return std::vector<std::string>{v->get<std::string>()};
  if (!v->is_array()) return json_util::TypeError(ctx, key, "a string or a list of strings", *v);
  for (const Json& e : *v) {
    if (!e.is_string()) return json_util::TypeError(ctx, key, "a string or a list of strings", *v);
    out.push_back(e.get<std::string>());
  }
  return out;
}

absl::Status Unimplemented(const std::string& ctx, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(ctx, ": unsupported ", what));
}

}  // namespace

absl::StatusOr<TransformConfig> ParseTransformConfig(std::string_view json_text,
                                                     std::string_view source_name) {
  const std::string source(source_name);
  TransformConfig config;
  SCORED_ASSIGN_OR_RETURN(
      Json j, json_util::ParseObject(absl::string_view(json_text.data(), json_text.size()), source));
  const Json* groups = Find(j, "config_groups");
  if (groups == nullptr || groups->is_null()) return config;
  if (!groups->is_object())
    return json_util::TypeError(source, "transform_config.config_groups", "an object", *groups);
  for (auto it = groups->begin(); it != groups->end(); ++it) {
    const std::string ctx =
        absl::StrCat(source, ": quantization_config transform_config group '", it.key(), "'");
    const Json& g = it.value();
    if (!g.is_object()) return absl::InvalidArgumentError(absl::StrCat(ctx, ": must be an object"));
    TransformConfig::Scheme scheme;
    scheme.name = it.key();
    SCORED_ASSIGN_OR_RETURN(scheme.type, json_util::GetString(g, "type", ctx, std::string()));
    if (scheme.type != "hadamard" && scheme.type != "random-hadamard") {
      return Unimplemented(ctx, absl::StrCat("type '", scheme.type, "' (hadamard and random-hadamard are)"));
    }
    SCORED_ASSIGN_OR_RETURN(const bool randomize, json_util::GetBool(g, "randomize", ctx, false));
    if (randomize) return Unimplemented(ctx, "randomize true (permuted Hadamard matrices)");
    if (const Json* hd = Find(g, "head_dim"); hd != nullptr && !hd->is_null()) {
      SCORED_ASSIGN_OR_RETURN(scheme.head_dim, json_util::GetInt(g, "head_dim", ctx, 0));
      if (scheme.head_dim <= 0)
        return absl::InvalidArgumentError(absl::StrCat(ctx, ": head_dim must be > 0"));
    }
    const Json* apply = Find(g, "apply");
    if (apply == nullptr || !apply->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(ctx, ": apply must be a list"));
    }
    for (const Json& a : *apply) {
      if (!a.is_object())
        return absl::InvalidArgumentError(absl::StrCat(ctx, ": apply entries must be objects"));
      TransformConfig::Apply entry;
      SCORED_ASSIGN_OR_RETURN(entry.targets, StringList(a, "targets", ctx));
      SCORED_ASSIGN_OR_RETURN(entry.ignore, StringList(a, "ignore", ctx));
      SCORED_ASSIGN_OR_RETURN(entry.location, json_util::GetString(a, "location", ctx, std::string()));
      SCORED_ASSIGN_OR_RETURN(entry.inverse, json_util::GetBool(a, "inverse", ctx, false));
      if (entry.location == "q_attn" || entry.location == "k_cache") {
        return Unimplemented(ctx, absl::StrCat("location '", entry.location,
                                               "' (online rotations inside attention, SpinQuant's R3)"));
      }
      if (entry.location != "input" && entry.location != "output" && entry.location != "weight_input" &&
          entry.location != "weight_output") {
        return Unimplemented(ctx, absl::StrCat("location '", entry.location, "'"));
      }
      // A bad regex fails here, at parse time.
      absl::Status regex_error;
      for (const std::vector<std::string>* list : {&entry.targets, &entry.ignore}) {
        for (const std::string& t : *list) TargetMatches("", t, &regex_error);
      }
      SCORED_RETURN_IF_ERROR(regex_error);
      scheme.apply.push_back(std::move(entry));
    }
    config.schemes.push_back(std::move(scheme));
  }
  return config;
}

absl::StatusOr<std::vector<OnlineTransform>> ResolveTransforms(const TransformConfig& config,
                                                               const std::string& module) {
  std::vector<OnlineTransform> inputs, outputs;
  for (const TransformConfig::Scheme& scheme : config.schemes) {
    for (const TransformConfig::Apply& a : scheme.apply) {
      if (a.location != "input" && a.location != "output") continue;  // offline: already in the weights
      absl::Status error;
      bool targeted = false, ignored = false;
      for (const std::string& t : a.targets) targeted = targeted || TargetMatches(module, t, &error);
      for (const std::string& t : a.ignore) ignored = ignored || TargetMatches(module, t, &error);
      SCORED_RETURN_IF_ERROR(error);
      if (!targeted || ignored) continue;
      OnlineTransform t{scheme.name, a.location, a.inverse, scheme.head_dim};
      (a.location == "input" ? inputs : outputs).push_back(std::move(t));
    }
  }
  for (OnlineTransform& t : outputs) inputs.push_back(std::move(t));
  return inputs;
}

}  // namespace scored

// compressed-tensors transform_config (the rotations llm-compressor's QuIPModifier and SpinQuantModifier
// write): parsing and per-module resolution of the ONLINE transforms an engine must apply (DESIGN.md §6).
//
// A transform scheme (config group) has a type (hadamard, random-hadamard), an optional head_dim
// (block-diagonal over heads of that size), randomize (permutations: refused), precision and a list of
// `apply` entries: targets / ignore (matched like quantization targets), a location and inverse. Locations:
//   weight_input, weight_output   offline: fused into the stored weights at save; nothing to do at inference
//   input, output                 online on a Linear: x -> (x T) / sqrt(n) before it, y -> (y T) / sqrt(n)
//   after
//                                 it (T^T when inverse), computed in float64 and rounded to the value's
//                                 dtype, as compressed-tensors 0.19 (factory/hadamard.py, utils/matrix.py)
//                                 does
//   q_attn, k_cache               online inside attention (SpinQuant R3): refused, naming the location
// T is the scheme's stored F64 [n, n] matrix for that size, saved once per size as
// "<first module using it>.<scheme>_<location>.weight" and shared (tied) by every module of that size.
//
// Thread-safety: pure functions on immutable values.
#ifndef SCORED_ENGINE_MODEL_TRANSFORM_CONFIG_H_
#define SCORED_ENGINE_MODEL_TRANSFORM_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace scored {

struct TransformConfig {
  struct Apply {
    std::vector<std::string> targets;  // names, "re:" regexes, class names ("Linear")
    std::vector<std::string> ignore;
    std::string location;  // input | output | weight_input | weight_output
    bool inverse = false;
  };
  struct Scheme {
    std::string name;  // config group name: the stored matrices are "<module>.<name>_<location>.weight"
    std::string type;  // hadamard | random-hadamard
    int64_t head_dim = 0;
    std::vector<Apply> apply;
  };
  std::vector<Scheme> schemes;  // in config order
  bool empty() const { return schemes.empty(); }
};

// One online transform of a Linear, in the order it applies.
struct OnlineTransform {
  std::string scheme;
  std::string location;  // input | output
  bool inverse = false;
  int64_t head_dim = 0;  // 0: the whole row
  // The stored matrix's name suffix: ".<scheme>_<location>.weight".
  std::string TensorSuffix() const { return "." + scheme + "_" + location + ".weight"; }
};

// Parses the raw transform_config JSON (an object; "{}" and null are none). INVALID_ARGUMENT naming `source`
// and the field for anything not implemented (other types, randomize, q_attn / k_cache locations, a bad
// target regex).
absl::StatusOr<TransformConfig> ParseTransformConfig(std::string_view json_text, std::string_view source);

// The online transforms of the Linear `module`: inputs first, then outputs, each in config order.
absl::StatusOr<std::vector<OnlineTransform>> ResolveTransforms(const TransformConfig& config,
                                                               const std::string& module);

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_TRANSFORM_CONFIG_H_

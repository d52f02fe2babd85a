// compressed-tensors quantization_config: parsing and per-module scheme resolution (DESIGN.md §6).
//
// Supported (anything else fails with INVALID_ARGUMENT naming the group and the feature):
//   format              weights                                   input_activations
//   dense               -                                         -
//   pack-quantized      int, 2..8 bits, tensor|channel|group,     none (W4A16 / W8A16)
//                       sym or asym (group/channel), actorder
//                       none|weight|group (weight_g_idx)
//   nvfp4-pack-quantized float 4 bits, tensor_group, group 16     none (NVFP4A16) or float 4 bits
//                                                                 tensor_group (W4A4: run weight-only)
//   mxfp4-pack-quantized float 4 bits, group 32, E8M0 scales   none (MXFP4A16); MXFP4 W4A4 is refused
//   float-quantized     float 8 bits, tensor|channel|block        none (W8A16) or dynamic float 8 bits
//                                                                 per token or per token-group (W8A8
//                                                                 dynamic FP8, e.g. FP8_BLOCK) or static
//                                                                 float 8 bits per tensor (FP8 scheme,
//                                                                 `input_scale`)
//   naive-quantized /   int 8 bits, tensor|channel|group, sym     none (W8A16) or dynamic int 8 bits per
//   int-quantized       or asym                                   token, sym or asym (W8A8 INT8), or static
//                                                                 int 8 bits per tensor, sym or asym
//                                                                 (`input_scale`, `input_zero_point`)
//   int-quantized /     int 2..7 bits (one value per int8),       dynamic float 8 or int 8 bits per token
//   pack-quantized      tensor|channel|group                      (W4AFP8 / W4A8; pack-quantized also none)
// float-, naive- and int-quantized are one compressor upstream: the weights' type picks FP8 (float 8)
// or int8 for any of the three names.
// Top-level `format` applies to every group; "mixed-precision" means each group carries its own.
// kv_cache_scheme: static per-tensor symmetric FP8 only (kv_cache_fp8).
// transform_config: online input / output Hadamard rotations of Linears (engine/model/transform_config.h).
// sparsity_config: "dense" or empty, or "sparse-24-bitmask" with sparsity_structure "2:4", as
// compressed-tensors wrote it (releases up to 0.14; later ones write 2:4 sparse models dense). Its
// compressor ran after quantization and rewrote only tensors named `weight` (dense, FP8, int8); packed
// formats stay as they are. Other formats and structures are rejected naming the field.
// Rejected: other transforms, other kv_cache_schemes, static input activations other than per tensor with
// 8-bit weights of the same type, activations other than the above (per tensor dynamic, per group int, other
// widths), output activations, quantization_status other than "compressed".
//
// Target matching follows compressed-tensors: a module matches a target that equals its name, a
// "re:" regex that matches at the start of its name (Python re.match), or the class name "Linear" (every
// module resolved here is a linear layer). Among matching targets the most specific wins: exact names,
// then regexes (each in sorted order), then class names. Modules matched by `ignore` (same rules), and
// modules no group targets, are dense.
//
// Thread-safety: both functions are pure (no shared state); a parsed config is immutable.
#ifndef SCORED_ENGINE_MODEL_COMPRESSED_TENSORS_H_
#define SCORED_ENGINE_MODEL_COMPRESSED_TENSORS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/transform_config.h"
#include "engine/model/weights.h"

namespace scored {

// How one config group stores its weights; also the resolution for one module.
struct ModuleScheme {
  bool quantized = false;   // false: dense (ignored or untargeted module)
  std::string group;        // config group name ("" when dense)
  std::string format_name;  // compressed-tensors format string, e.g. "pack-quantized"
  WeightFormat format = WeightFormat::kDense;
  int num_bits = 16;
  bool symmetric = true;
  QuantStrategy strategy = QuantStrategy::kTensor;
  int64_t group_size = 0;                  // kGroup
  int64_t block_rows = 0, block_cols = 0;  // kBlock
  bool actorder_group = false;             // weight_g_idx expected
  bool w8a8_dynamic_fp8 = false;           // FP8 or int4 weights + dynamic FP8 activations (per token)
  int64_t act_group_size = 0;              // w8a8_dynamic_fp8: 0 per token, else per token per group
  bool w8a8_dynamic_int8 = false;          // int8 or int4 weights + dynamic int8 activations (per token)
  bool static_input_fp8 = false;           // FP8 weights + static per-tensor FP8 activations (input_scale)
  bool static_input_int8 = false;          // int8 weights + static per-tensor int8 activations (input_scale)
  bool act_symmetric = true;               // int8 activations: false = a zero point per token / tensor
  bool w4a4_run_weight_only = false;       // nvfp4 with FP4 input activations, run as W4A16
};

struct CompressedTensorsConfig {
  std::string format;  // top-level format ("mixed-precision" allowed)
  std::string quantization_status;
  std::vector<std::string> ignore;  // names and "re:" regexes
  struct Group {
    std::string name;
    std::vector<std::string> targets;  // names, "re:" regexes, class names
    ModuleScheme scheme;               // validated at parse time
  };
  std::vector<Group> groups;  // in config order
  // kv_cache_scheme static per-tensor FP8: K (after RoPE) and V of every attention layer are
  // quantize-dequantized to FP8 E4M3 with the layer's stored k_scale / v_scale, as compressed-tensors'
  // QuantizedKVCache does in a transformers forward (Q untouched).
  bool kv_cache_fp8 = false;
  // transform_config (QuIP / SpinQuant rotations): its online transforms (engine/model/transform_config.h).
  TransformConfig transforms;
  // sparsity_config with format "sparse-24-bitmask" (structure "2:4"): linears that store
  // shape/compressed/bitmask instead of `weight` (engine/model/sparse24.h) are decompressed at load.
  // targets / ignore are kept for the record: decompression, like the library's, follows the tensors.
  struct Sparsity {
    bool sparse24 = false;
    std::vector<std::string> targets;  // names, "re:" regexes, class names
    std::vector<std::string> ignore;
  } sparsity;
};

// Parses and validates the raw quantization_config JSON (ModelConfig::quantization_config_json).
// source names the file in error messages.
absl::StatusOr<CompressedTensorsConfig> ParseCompressedTensorsConfig(std::string_view json_text,
                                                                     std::string_view source);

// Whether `module` matches `target` as compressed-tensors matches targets (the name, an anchored "re:" regex,
// or the class names "Linear" / "Module" for a non-empty module name). A bad regex sets *error and matches
// nothing.
bool TargetMatches(const std::string& module, const std::string& target, absl::Status* error);

// The scheme of the linear module `module` (e.g. "model.layers.0.self_attn.q_proj", "lm_head").
// INVALID_ARGUMENT when a "re:" pattern is not a valid regex.
absl::StatusOr<ModuleScheme> ResolveModuleScheme(const CompressedTensorsConfig& config,
                                                 const std::string& module);

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_COMPRESSED_TENSORS_H_

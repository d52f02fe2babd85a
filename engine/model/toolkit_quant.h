// Checkpoints written by other quantization toolkits than compressed-tensors (DESIGN.md §6): GPTQ
// (GPTQModel / AutoGPTQ, `quantization_config.quant_method: "gptq"`), AWQ (AutoAWQ, `"awq"`, GEMM
// packing), NVIDIA ModelOpt FP8 / NVFP4 (`"modelopt"` or hf_quant_config.json) and transformers' native
// block FP8 (`"fp8"`, the official FP8 releases of DeepSeek, Qwen3 / 3.5 / 3.6, MiniMax-M2, Mistral Large 3).
// Each module's tensors are transcoded at load into the compressed-tensors representation LinearWeight
// already has, so the exact host decoding (weights.h), the CPU reference and every CUDA kernel run unchanged:
//
//   toolkit tensors (module P)                         -> LinearWeight
//   GPTQ  P.qweight I32 [in*b/32, out] (packed along in, -> kPackQuantized, b = 4 or 8: weight_packed =
//         LSB first), P.qzeros I32 [groups, out*b/32]      qweight transposed (the same bit stream),
//         (packed along out), P.scales F16 [groups, out],  weight_scale = scales transposed, zero points
//         P.g_idx I32 [in]                                 repacked along out (omitted when all are
//                                                          2^(b-1): symmetric), g_idx kept when it is
//                                                          not k / group_size (desc_act)
//   AWQ   P.qweight I32 [in, out/8], P.qzeros I32          -> kPackQuantized, 4 bits, the same way after
//         [groups, out/8] (both packed along out, nibble    undoing the nibble order
//         n = column 8c + [0,2,4,6,1,3,5,7][n]),
//         P.scales F16 [groups, out]
//   ModelOpt FP8  P.weight F8_E4M3 [out, in], P.weight_scale -> kFloatQuantized, per tensor; static FP8
//         F32 [] (a multiplier), P.input_scale F32 []       input activations when input_scale is stored
//   ModelOpt NVFP4  P.weight U8 [out, in/2],            -> kNvfp4PackQuantized with weight_global_scale =
//         P.weight_scale F8_E4M3 [out, in/16],              a divisor that decodes every element exactly as
//         P.weight_scale_2 F32 [] (a multiplier),           the multiplier does (nibble 8 rewritten to 0:
//         P.input_scale F32 [] (FP4 activations)            ModelOpt reads it as +0), else kDense BF16
//         decoded
//                                                           at load (the same values); run weight-only (W4A4)
//   native FP8  P.weight F8_E4M3 [out, in],              -> kFloatQuantized, strategy kBlock (the
//         P.weight_scale_inv F32/BF16 [ceil(out/br),        compressed-tensors FP8_BLOCK form: the scale
//         ceil(in/bc)] (despite its name a multiplier:      is weight_scale as it is), dynamic FP8 input
//         w = e4m3 * s), weight_block_size [br, bc]         activations per token and group of bc columns
//                                                           (activation_scheme "dynamic", transformers'
//                                                           FP8Linear act_quant)
//
// Values: GPTQ and AWQ decode to w = (q - z) * scale with z the stored zero point (GPTQ's "gptq" v1
// checkpoint format stores z - 1, "gptq_v2" stores z); the engine keeps that product exact in fp32, the
// libraries compute it in float16 (their scales' dtype), i.e. the exact product rounded to float16
// (tests/fixtures/README.md). ModelOpt FP8 is w = fp32(e4m3) * weight_scale and x -> fp8(x / input_scale)
// * input_scale, compressed-tensors' FP8 static scheme.
//
// Refused with INVALID_ARGUMENT naming the field: GPTQ bits other than 4 and 8 (2/3-bit), checkpoint
// formats other than gptq / gptq_v2 (marlin, bitblas, ...), pack_dtype other than int32, `dynamic`
// per-module overrides, a v1 zero point that overflows (stored 2^b - 1); AWQ `version` / `format` other than
// gemm (gemv, gemv_fast, llm-awq), backend llm-awq, zero_point false, bits other than 4; ModelOpt quant_algo
// other than FP8 and NVFP4 (FP8_PER_CHANNEL_PER_TOKEN, W4A8_AWQ, ...), NVFP4 group_size other than 16, and
// kv_cache_quant_algo other than FP8 (NVFP4, NVFP4_AFFINE, INT8) or an affine FP8 one (k_bias / v_bias);
// native FP8 activation_scheme "static", weight_block_size null (per tensor), scale_fmt "ue8m0" and
// modules_to_convert. A native FP8 module is quantized when its weight_scale_inv is stored
// (modules_to_not_convert, ignored_layers: stored dense, as transformers leaves them nn.Linear); one listed
// there but stored quantized is refused.
//
// Thread-safety: pure functions; a parsed config is immutable.
#ifndef SCORED_ENGINE_MODEL_TOOLKIT_QUANT_H_
#define SCORED_ENGINE_MODEL_TOOLKIT_QUANT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"

namespace scored {

struct ToolkitQuantConfig {
  enum class Method { kGptq, kAwq, kModelOptFp8, kModelOptNvfp4, kNativeFp8Block };
  Method method = Method::kGptq;
  std::string source;                      // file the config came from (error messages)
  int bits = 4;                            // GPTQ / AWQ
  int64_t group_size = -1;                 // GPTQ / AWQ; -1: one group per row
  bool desc_act = false;                   // GPTQ: g_idx may be any assignment of columns to groups
  bool zero_point_minus_one = false;       // GPTQ "gptq" (v1) checkpoint format
  int64_t block_rows = 0, block_cols = 0;  // native FP8: weight_block_size
  bool kv_cache_fp8 = false;               // ModelOpt kv_cache_quant_algo "FP8" (LoadModelOptKvScales)
  std::vector<std::string> not_converted;  // native FP8: modules_to_not_convert (module name suffixes)
  std::string label;  // e.g. "gptq-v1", "awq-gemm", "modelopt-fp8", for the model summary
};

// Whether the quantization_config JSON names a toolkit method handled here ("gptq", "awq", "modelopt",
// "fp8").
bool IsToolkitQuantMethod(absl::string_view quantization_config_json);

// Parses a GPTQ / AWQ / ModelOpt quantization_config (config.json) or a ModelOpt hf_quant_config.json
// (`{"producer": {...}, "quantization": {"quant_algo": ...}}`). INVALID_ARGUMENT naming `source` and the
// field for anything not implemented (see the file comment).
absl::StatusOr<ToolkitQuantConfig> ParseToolkitQuantConfig(absl::string_view json_text,
                                                           absl::string_view source);

// Whether `module` is stored in the toolkit's quantized form (GPTQ/AWQ: `module.qweight` exists;
// ModelOpt: `module.weight_scale` exists; native FP8: `module.weight_scale_inv`). Others are dense
// (modules_to_not_convert, exclude_modules).
bool ToolkitModuleQuantized(const ToolkitQuantConfig& config, const TensorStore& store,
                            const std::string& module);

// Host buffers that transcoded tensors live in; a LinearWeight's views point into them, so they must
// live as long as the LinearWeight (ModelWeights owns them).
using TranscodedBuffers = std::vector<std::unique_ptr<std::vector<uint8_t>>>;

// Fills `w` (whose module, out_features and in_features are set) from the toolkit tensors of its module:
// format, quantization parameters and tensor views (into `store` or into buffers appended to `buffers`).
// Appends the names of the tensors it read to `consumed`. INVALID_ARGUMENT naming the file and tensor for
// a missing tensor, a wrong dtype or shape, a g_idx outside [0, groups) or a zero point that the format
// cannot hold; NOT_FOUND for an absent tensor.
absl::Status LoadToolkitLinear(const ToolkitQuantConfig& config, const TensorStore& store, LinearWeight* w,
                               std::vector<std::string>* consumed, TranscodedBuffers* buffers);

// ModelOpt's static FP8 K / V scales of the attention module `attn` (e.g. "model.layers.0.self_attn"), the
// same quantize-dequantize as compressed-tensors' kv_cache_scheme (k -> fp8(k / k_scale) * k_scale after
// RoPE, v likewise). Its HF export writes k_bmm_quantizer's amax / 448 as `attn.k_proj.k_scale` and v's as
// `attn.v_proj.v_scale` (modelopt/torch/export/quant_utils.py: _KV_CACHE_REPLACEMENTS,
// postprocess_state_dict). One it did not write (a quantizer without amax) is 1.0, the default scale ModelOpt
// recommends for FP8 (get_kv_cache_scaling_factor) and what its deployers apply; *defaulted counts those.
// Affine FP8
// (`k_bias` / `v_bias`) is refused naming the tensor; a scale must be finite, > 0, [] or [1].
absl::Status LoadModelOptKvScales(const TensorStore& store, const std::string& attn, TensorView* k_scale,
                                  TensorView* v_scale, std::vector<std::string>* consumed,
                                  TranscodedBuffers* buffers, int* defaulted);

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_TOOLKIT_QUANT_H_

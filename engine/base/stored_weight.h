// The vocabulary of stored (checkpoint) weights that the model loader (engine/model) and the kernels
// (engine/kernels, whose dequant kernel decodes these formats) both speak: tensor dtypes, a view of a
// stored tensor, the compressed-tensors weight formats and the stored tensors of one linear layer.
//
// Plain data only: no I/O, no decoding. engine/model fills these (safetensors.h, weights.h, where
// LinearWeight adds the exact host decoding), engine/kernels reads them (dequant.h). Living in
// engine/base keeps the kernels free of any model dependency.
//
// Ownership: a TensorView does not own its bytes; whoever made it (an mmapped file, a shard's buffer)
// keeps them alive. Thread-safety: values; const use from any thread.
#ifndef SCORED_ENGINE_BASE_STORED_WEIGHT_H_
#define SCORED_ENGINE_BASE_STORED_WEIGHT_H_

#include <cstdint>
#include <string>
#include <vector>

namespace scored {

// safetensors element types.
enum class DType { kF32, kF16, kBF16, kF8E4M3, kI8, kU8, kI32, kI64, kF64 };

const char* DTypeName(DType dtype);  // safetensors spelling: "F32", "BF16", "F8_E4M3", ...
int64_t DTypeSize(DType dtype);      // bytes per element

// A stored tensor in host memory (usually inside an mmapped safetensors file).
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // nullptr: absent
  int64_t nbytes = 0;
  std::string file;  // path of the file it lives in (for error messages)

  bool present() const { return data != nullptr; }
  int64_t NumElements() const;  // product of shape (1 for a scalar)
};

// How one linear layer's weight is stored (resolved from quantization_config for that module).
enum class WeightFormat {
  kDense,               // `weight` F32/F16/BF16 [out, in]
  kPackQuantized,       // int4/int8 `weight_packed` int32 [out, ceil(in*b/32)] + scale (+ zero point, g_idx)
  kNvfp4PackQuantized,  // `weight_packed` uint8 [out, in/2] + fp8 `weight_scale` [out, in/16] + global scale
  kFloatQuantized,      // FP8 E4M3 `weight` [out, in] + `weight_scale` (tensor/channel/block)
  kNaiveQuantized,      // int8 `weight` [out, in] stored as I8 + scale (+ zero point) ("int-quantized")
  kMxfp4PackQuantized,  // `weight_packed` uint8 [out, in/2] (as nvfp4) + E8M0 `weight_scale` U8 [out, in/32]
  // GGUF: `weight_packed` U8 [out, row bytes], each row its in / block_size blocks of ggml type `ggml_type`
  // (engine/model/gguf_quants.h), scales inside the blocks.
  kGgmlBlocks,
};

enum class QuantStrategy { kTensor, kChannel, kGroup, kBlock };

// The stored tensors of one linear layer and the format they are in. engine/model's LinearWeight is this
// plus its exact host decoding (weights.h); the kernels take it as a StoredLinear (dequant.h).
struct StoredLinear {
  std::string module;  // e.g. "model.layers.0.self_attn.q_proj"
  int64_t out_features = 0;
  int64_t in_features = 0;
  WeightFormat format = WeightFormat::kDense;

  // Quantization parameters (meaningful when format != kDense).
  int num_bits = 16;  // 4 or 8 for pack-quantized; 4 for nvfp4 / mxfp4; 8 for fp8/int8
  bool symmetric = true;
  QuantStrategy strategy = QuantStrategy::kTensor;
  int64_t group_size = 0;                  // kGroup: elements of `in` per scale; nvfp4: 16; mxfp4: 32
  int64_t block_rows = 0, block_cols = 0;  // kBlock (fp8): scale block shape, usually 128 x 128
  bool actorder_group = false;             // weight_g_idx present: group of column k is g_idx[k]
  // Dynamic per-token FP8 input activations: FP8 weights (W8A8, float-quantized) or int4 weights (W4AFP8).
  bool w8a8_dynamic_fp8 = false;
  // w8a8_dynamic_fp8 only: 0 = one activation scale per token (strategy "token"); > 0 = one scale per
  // token per act_group_size consecutive input columns (strategy "group", e.g. 128 in FP8_BLOCK schemes).
  int64_t act_group_size = 0;
  // kNaiveQuantized (int8 weights) with dynamic int8 input activations, one scale per token ("int-quantized",
  // llm-compressor's W8A8 / INT8 schemes): each input row is quantize-dequantized to int8 before the product
  // (engine/reference/ops.h FakeQuantizeInt8PerToken has the exact arithmetic).
  // Also set for int4 weights with dynamic int8 activations (llm-compressor's W4A8).
  bool w8a8_dynamic_int8 = false;
  // Static input activations (input_activations.dynamic false, strategy tensor): every input element is
  // quantize-dequantized with the stored per-tensor `input_scale` (and `input_zero_point` when asymmetric),
  // to FP8 E4M3 (static_input_fp8, llm-compressor's FP8 scheme) or int8 (static_input_int8).
  bool static_input_fp8 = false;
  bool static_input_int8 = false;
  // w8a8_dynamic_int8 / static_input_int8: false = asymmetric (a zero point per token / input_zero_point).
  bool act_symmetric = true;
  bool w4a4_run_weight_only = false;  // nvfp4 W4A4 checkpoint (input_global_scale present), run as W4A16
  uint32_t ggml_type = 0;             // kGgmlBlocks: the blocks' ggml type id (GgmlType)

  // Stored tensors (data == nullptr when absent).
  TensorView weight;               // kDense / kFloatQuantized / kNaiveQuantized
  TensorView weight_packed;        // kPackQuantized / kNvfp4PackQuantized / kMxfp4PackQuantized
  TensorView weight_scale;         // quantized formats
  TensorView weight_zero_point;    // asymmetric only
  TensorView weight_g_idx;         // actorder=group only
  TensorView weight_global_scale;  // nvfp4 only: fp32 [1], a DIVISOR
  TensorView input_global_scale;   // nvfp4 W4A4 only (ignored: weight-only run)
  TensorView input_scale;          // static_input_*: F32/BF16/F16 [1]
  TensorView input_zero_point;     // static_input_int8 asymmetric: I8 [1]
  TensorView bias;                 // q/k/v bias of families with one (Qwen2), [out]; absent otherwise
};

}  // namespace scored

#endif  // SCORED_ENGINE_BASE_STORED_WEIGHT_H_

// Model weights as stored on disk: config, tensors (mmapped safetensors, zero-copy) and, per linear
// layer, the compressed-tensors format its tensors are in. Decoding to real values is exact
// (DESIGN.md §6): DequantizeRows() gives bit for bit what compressed-tensors' own decompression gives.
//
// Ownership: ModelWeights owns the mmaps; every TensorView and LinearWeight points into them and lives as
// long as the ModelWeights. Thread-safety: immutable after Load(); all const methods are thread-safe.
#ifndef SCORED_ENGINE_MODEL_WEIGHTS_H_
#define SCORED_ENGINE_MODEL_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/safetensors.h"

namespace scored {

// How one linear layer's weight is stored (resolved from quantization_config for that module).
enum class WeightFormat {
  kDense,               // `weight` F32/F16/BF16 [out, in]
  kPackQuantized,       // int4/int8 `weight_packed` int32 [out, ceil(in*b/32)] + scale (+ zero point, g_idx)
  kNvfp4PackQuantized,  // `weight_packed` uint8 [out, in/2] + fp8 `weight_scale` [out, in/16] + global scale
  kFloatQuantized,      // FP8 E4M3 `weight` [out, in] + `weight_scale` (tensor/channel/block)
  kNaiveQuantized,      // int8 `weight` [out, in] stored as I8 + scale (+ zero point) ("int-quantized")
};

enum class QuantStrategy { kTensor, kChannel, kGroup, kBlock };

struct LinearWeight {
  std::string module;  // e.g. "model.layers.0.self_attn.q_proj"
  int64_t out_features = 0;
  int64_t in_features = 0;
  WeightFormat format = WeightFormat::kDense;

  // Quantization parameters (meaningful when format != kDense).
  int num_bits = 16;  // 4 or 8 for pack-quantized; 4 for nvfp4; 8 for fp8/int8
  bool symmetric = true;
  QuantStrategy strategy = QuantStrategy::kTensor;
  int64_t group_size = 0;                  // kGroup: elements of `in` per scale; nvfp4: 16
  int64_t block_rows = 0, block_cols = 0;  // kBlock (fp8): scale block shape, usually 128 x 128
  bool actorder_group = false;             // weight_g_idx present: group of column k is g_idx[k]
  bool w8a8_dynamic_fp8 = false;           // float-quantized with dynamic per-token FP8 input activations
  // w8a8_dynamic_fp8 only: 0 = one activation scale per token (strategy "token"); > 0 = one scale per
  // token per act_group_size consecutive input columns (strategy "group", e.g. 128 in FP8_BLOCK schemes).
  int64_t act_group_size = 0;
  bool w4a4_run_weight_only = false;  // nvfp4 W4A4 checkpoint (input_global_scale present), run as W4A16

  // Stored tensors (data == nullptr when absent).
  TensorView weight;         // kDense / kFloatQuantized / kNaiveQuantized
  TensorView weight_packed;  // kPackQuantized / kNvfp4PackQuantized
  TensorView weight_scale;
  TensorView weight_zero_point;    // asymmetric only
  TensorView weight_g_idx;         // actorder=group only
  TensorView weight_global_scale;  // nvfp4 only: fp32 [1], a DIVISOR
  TensorView input_global_scale;   // nvfp4 W4A4 only (ignored: weight-only run)
  TensorView bias;                 // Qwen2 q/k/v bias, [out]; absent otherwise

  // Decodes rows [row_begin, row_end) of W into out[(row - row_begin) * in_features + k], fp32.
  // Values are exactly compressed-tensors' decompression (DESIGN.md §6): for pack/naive/float-quantized
  // the product (q - zp) * scale, which is exact in fp32 (= its decompression with float32 parameters;
  // rounding it RNE to the scale's dtype bf16/fp16 gives exactly its decompression in that dtype); for
  // nvfp4 the product rounded to bf16 (compressed-tensors always decompresses NVFP4 to bf16). Dense
  // weights are widened exactly. OUT_OF_RANGE for a bad row range. Thread-safe.
  absl::Status DequantizeRows(int64_t row_begin, int64_t row_end, float* out) const;

  // Bytes of every stored tensor of this weight (values, scales, zero points, g_idx; not bias).
  int64_t StoredBytes() const;
  // out_features * in_features.
  int64_t NumElements() const { return out_features * in_features; }
};

struct LayerWeights {
  TensorView input_layernorm;                   // [hidden_size]
  TensorView post_attention_layernorm;          // [hidden_size]
  TensorView q_norm, k_norm;                    // Qwen3 only: [head_dim]; data == nullptr otherwise
  LinearWeight q_proj, k_proj, v_proj, o_proj;  // [num_heads*head_dim | num_kv_heads*head_dim, hidden]
  LinearWeight gate_proj, up_proj, down_proj;   // [intermediate, hidden], [hidden, intermediate]
};

struct ModelSummary {
  int64_t num_parameters = 0;  // logical (unpacked) count, embeddings and norms included
  int64_t decoder_linear_params = 0;
  double bits_per_weight_decoder = 0.0;  // 8 * stored bytes of decoder linears / decoder_linear_params
  double bits_per_weight_head = 0.0;     // same for lm_head (tied: the embedding's)
  int64_t resident_bytes = 0;            // all stored tensor bytes the engine keeps
  std::string format;            // short name, e.g. "w4a16-g128-sym", "nvfp4a16", "fp8-w8a8", "dense-f32"
  std::string notes;             // e.g. "W4A4 checkpoint run weight-only (NVFP4A16)"
  std::string ToString() const;  // multi-line human summary for the startup log
};

class ModelWeights {
 public:
  // Loads config.json and the safetensors file(s) of `model_dir` (single file or sharded index), resolves
  // every module's format. Errors name the file and tensor (missing, wrong shape/dtype, truncated),
  // or the unsupported config/quantization feature.
  static absl::StatusOr<std::unique_ptr<ModelWeights>> Load(const std::string& model_dir);

  const ModelConfig& config() const { return config_; }
  const TensorView& embed_tokens() const { return embed_tokens_; }  // [vocab_size, hidden_size]
  const TensorView& final_norm() const { return final_norm_; }      // [hidden_size]
  // lm_head; for tied embeddings a kDense LinearWeight over embed_tokens.
  const LinearWeight& lm_head() const { return lm_head_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  const ModelSummary& summary() const { return summary_; }
  const TensorStore& store() const { return *store_; }

 private:
  ModelWeights() = default;
  friend class ModelWeightsLoader;

  ModelConfig config_;
  std::unique_ptr<TensorStore> store_;
  TensorView embed_tokens_;
  TensorView final_norm_;
  LinearWeight lm_head_;
  std::vector<LayerWeights> layers_;
  ModelSummary summary_;
};

// Converts an F32/F16/BF16 tensor to fp32 (exact widening). INVALID_ARGUMENT for other dtypes or
// when out_size != element count.
absl::Status TensorToFloat(const TensorView& t, float* out, int64_t out_size);

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_WEIGHTS_H_

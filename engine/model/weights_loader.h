// The weight loader behind ModelWeights::Load (weights.h): config.json, the layer plan, the tensors of
// every layer by its plan (any compressed-tensors / toolkit format), the checks, the summary. Internal to
// engine/model: weights_loader.cc loads, weights_summary.cc summarizes.
#ifndef SCORED_ENGINE_MODEL_WEIGHTS_LOADER_H_
#define SCORED_ENGINE_MODEL_WEIGHTS_LOADER_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/model/compressed_tensors.h"
#include "engine/model/toolkit_quant.h"
#include "engine/model/weights.h"

namespace scored {

class ModelWeightsLoader {
 public:
  explicit ModelWeightsLoader(ModelWeights* m) : m_(m) {}

  absl::Status Load(const std::string& model_dir);

 private:
  // Fetches a tensor, marks it consumed and checks dtype class and shape.
  absl::StatusOr<TensorView> Take(const std::string& name);
  absl::StatusOr<TensorView> TakeChecked(const std::string& name, const std::vector<int64_t>& shape,
                                         std::initializer_list<DType> dtypes);
  absl::Status CheckShape(const TensorView& t, const std::vector<int64_t>& shape) const;
  absl::Status LoadLinear(const std::string& module, int64_t out, int64_t in, bool bias, LinearWeight* w);
  absl::Status LoadScale(LinearWeight* w, const std::string& module);
  // static_input_*: the per-tensor input_scale (and input_zero_point when asymmetric), validated.
  absl::Status LoadInputScale(LinearWeight* w, const std::string& module);
  // The online transforms of `module` (transform_config) and their stored matrices.
  absl::Status LoadTransforms(const std::string& module, LinearWeight* w);
  // A kv_cache_scheme's self_attn.k_scale / v_scale.
  absl::Status LoadKvScale(const std::string& name, TensorView* scale);
  // F32/F16/BF16 [1] (or a scalar), finite and > 0: a scale every element is divided by.
  absl::Status CheckPerTensorScale(const TensorView& s) const;
  // `<module>.weight` [out, in] of one of `dtypes`, or, under a sparse-24-bitmask sparsity_config when
  // `<module>.compressed` is stored, the same tensor decompressed from shape/compressed/bitmask
  // (sparse24.h). Packed formats (pack-quantized, nvfp4, mxfp4) never ask for it: the library's sparse
  // compressor left their tensors as they were, so they load as usual; stray sparse tensors on such a
  // module fail the unused-tensor check.
  absl::StatusOr<TensorView> TakeWeight(const std::string& module, int64_t out, int64_t in,
                                        std::initializer_list<DType> dtypes);
  // Layer l's tensors, as its plan (ModelWeights::plan) says.
  absl::Status LoadLayer(int64_t l, LayerWeights* out);
  // The mixture-of-experts block of sparse layer `prefix` ("model.layers.<l>.").
  absl::Status LoadMoe(const std::string& prefix, const ExpertsPlan& plan, MoeWeights* moe);
  // An attention layer's q / k / v / o (and q / k norms) under `prefix`.
  absl::Status LoadAttention(const std::string& prefix, const AttentionPlan& plan, LayerWeights* out);
  // A multi-head latent attention layer's tensors under `prefix` (family.h LatentAttentionTraits' names,
  // q_proj and o_proj the family's TensorNames).
  absl::Status LoadLatentAttention(const std::string& prefix, const LatentAttentionPlan& plan,
                                   LayerWeights* out);
  // A Gated DeltaNet layer's tensors under `prefix` (family.h LinearAttentionTraits' names).
  absl::Status LoadDeltaNet(const std::string& prefix, const DeltaNetPlan& plan, DeltaNetWeights* out);
  // The router [num_experts, hidden], dense, with its bias [num_experts] when `bias` (gpt-oss).
  absl::Status LoadRouter(const std::string& module, bool bias, LinearWeight* w);
  // gpt-oss's experts under `experts` ("model.layers.<l>.mlp.experts"): the dense fused tensors
  // (gpt_oss_experts.h) or, in a quant_method "mxfp4" checkpoint, the MXFP4 blocks (gpt_oss_mxfp4.h), with
  // their biases; or one module per expert with its bias in any compressed-tensors format (what
  // llm-compressor writes: `<experts>.<e>.gate_proj` / `up_proj` / `down_proj`, gate and up already
  // de-interleaved).
  absl::Status LoadGptOssExperts(const std::string& experts, MoeWeights* moe);
  // The sigmoid router's e_score_correction_bias [num_experts], never quantized (MoeWeights).
  absl::StatusOr<TensorView> LoadCorrectionBias(const std::string& name);
  // Experts stored fused: kDense views into the two tensors (MoeWeights).
  absl::Status LoadFusedExperts(const std::string& experts, MoeWeights* moe);
  // A fused module (FamilyTraits names qkv_proj / gate_up_proj) of parts[0].rows + parts[1].rows + ...
  // output rows, loaded whole and split by rows into one LinearWeight per part: each a view of the same
  // stored tensors (shard_plan.h ShardLinear's column-parallel cut: packed weights, per-row and group scales
  // by rows, per-tensor scales shared, packed zero points re-packed when a part does not start on a packing
  // boundary; re-packed tensors are owned by the ModelWeights). Quantized with fp8 blocks, a part must start
  // on a block boundary (INVALID_ARGUMENT naming the module otherwise).
  struct FusedPart {
    int64_t rows;
    const char* name;  // for the part's module name: "<module>[q]"
    LinearWeight* out;
  };
  absl::Status LoadFused(const std::string& module, int64_t in, std::initializer_list<FusedPart> parts);
  // An expert's three linears; `bias`: each carries a bias (gpt-oss).
  absl::Status LoadSwiGlu(const std::string& prefix, const char* gate, const char* up, const char* down,
                          int64_t intermediate, ExpertWeights* e, bool bias = false);
  absl::Status CheckLeftovers() const;
  // A tensor of a tower TextOnlyTraits leaves unread (or of a layer past the last:
  // TextOnlyTraits::layers_past_the_last).
  bool IgnoredTower(const std::string& name) const;
  // layer_prefix + "<l>." + within: l and within (a view into the name), or nullopt for any other name.
  struct LayerTensorName {
    int64_t layer = 0;
    absl::string_view within;
  };
  std::optional<LayerTensorName> SplitLayerName(const std::string& name) const;
  // `name` is layer_prefix + "<l>." + ... with l >= num_hidden_layers.
  bool LayerPastTheLast(const std::string& name) const;
  // `name` is layer_prefix + "<l>." + LatentAttentionTraits::indexer + ...: DeepSeek Sparse Attention's
  // indexer, not read.
  bool IgnoredIndexer(const std::string& name) const;
  absl::Status CheckFiniteParameters() const;
  void Summarize();

  ModelWeights* m_;
  std::optional<CompressedTensorsConfig> quant_;
  std::optional<ToolkitQuantConfig> toolkit_;  // GPTQ / AWQ / ModelOpt checkpoints (toolkit_quant.h)
  // quantization_config's quant_method is "mxfp4" (gpt-oss's original checkpoints): its experts are MXFP4
  // blocks, every other module dense (modules_to_not_convert).
  bool gpt_oss_mxfp4_ = false;
  int kv_scales_defaulted_ = 0;  // ModelOpt K / V scales not stored (1.0: LoadModelOptKvScales)
  std::set<std::string> consumed_;
  // The tensor names in use: the family's, or its TextOnlyTraits::alt_names layout.
  const TensorNames* names_ = nullptr;
  int sparse24_linears_ = 0;
};

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_WEIGHTS_LOADER_H_

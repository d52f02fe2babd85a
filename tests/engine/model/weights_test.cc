#include "engine/model/weights.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/base/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/model/st_writer.h"

namespace scored {
namespace {

using ::testing::HasSubstr;
using testing_util::StTensor;
using testing_util::TempDir;

const std::string kData = SCORED_DATA_DIR;

TEST(WeightsTest, Stories260K) {
  auto m = ModelWeights::Load(kData + "/stories260K-hf");
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelWeights& w = **m;
  EXPECT_EQ(w.config().num_layers, 5);
  ASSERT_EQ(w.layers().size(), 5u);
  EXPECT_EQ(w.embed_tokens().shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(w.final_norm().shape, (std::vector<int64_t>{64}));
  const LayerWeights& L = w.layers()[0];
  EXPECT_EQ(L.q_proj.module, "model.layers.0.self_attn.q_proj");
  EXPECT_EQ(L.q_proj.format, WeightFormat::kDense);
  EXPECT_EQ(L.q_proj.out_features, 64);
  EXPECT_EQ(L.k_proj.out_features, 32);
  EXPECT_EQ(L.v_proj.out_features, 32);
  EXPECT_EQ(L.o_proj.in_features, 64);
  EXPECT_EQ(L.gate_proj.out_features, 172);
  EXPECT_EQ(L.down_proj.in_features, 172);
  EXPECT_FALSE(L.q_norm.present());
  EXPECT_FALSE(L.q_proj.bias.present());
  // Tied: lm_head is a dense view of the embedding.
  EXPECT_EQ(w.lm_head().format, WeightFormat::kDense);
  EXPECT_EQ(w.lm_head().weight.data, w.embed_tokens().data);
  EXPECT_EQ(w.lm_head().out_features, 512);
  float row[64];
  ASSERT_TRUE(L.q_proj.DequantizeRows(0, 1, row).ok());
  EXPECT_EQ(row[1], 0.07974770665168762f);  // read with Python's struct from the file
  ASSERT_TRUE(w.lm_head().DequantizeRows(511, 512, row).ok());
  EXPECT_EQ(row[63], -0.424032598733902f);

  // 512*64 embedding + 5 * (64*64*2 + 32*64*2 + 172*64*3 linears + 2*64 norms) + 64 final norm.
  const ModelSummary& s = w.summary();
  EXPECT_EQ(s.num_parameters, 260032);
  EXPECT_EQ(s.decoder_linear_params, 5 * (4096 * 2 + 2048 * 2 + 11008 * 3));
  EXPECT_DOUBLE_EQ(s.bits_per_weight_decoder, 32.0);
  EXPECT_DOUBLE_EQ(s.bits_per_weight_head, 32.0);
  EXPECT_EQ(s.resident_bytes, 260032 * 4);
  EXPECT_EQ(s.format, "dense-f32");
  EXPECT_THAT(s.ToString(), HasSubstr("dense-f32"));
  EXPECT_THAT(s.ToString(), HasSubstr("260032"));
}

// A tiny model written to a temp folder; tests edit the config and tensors before writing.
struct TinyModel {
  nlohmann::json config;
  std::map<std::string, StTensor> tensors;

  static constexpr int64_t kHidden = 32, kInter = 64, kLayers = 2, kHeads = 4, kKv = 2, kHeadDim = 8,
                           kVocab = 16;

  explicit TinyModel(const std::string& arch = "LlamaForCausalLM", const std::string& type = "llama") {
    config = {{"architectures", {arch}},     {"model_type", type},           {"hidden_size", kHidden},
              {"intermediate_size", kInter}, {"num_hidden_layers", kLayers}, {"num_attention_heads", kHeads},
              {"num_key_value_heads", kKv},  {"head_dim", kHeadDim},         {"vocab_size", kVocab},
              {"rms_norm_eps", 1e-5},        {"tie_word_embeddings", false}, {"torch_dtype", "bfloat16"}};
    Dense("model.embed_tokens.weight", {kVocab, kHidden});
    Dense("model.norm.weight", {kHidden});
    Dense("lm_head.weight", {kVocab, kHidden});
    for (int64_t l = 0; l < kLayers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      Dense(p + "input_layernorm.weight", {kHidden});
      Dense(p + "post_attention_layernorm.weight", {kHidden});
      for (const auto& [name, out, in] : Linears()) Dense(p + name + ".weight", {out, in});
    }
  }

  static std::vector<std::tuple<std::string, int64_t, int64_t>> Linears() {
    return {{"self_attn.q_proj", kHeads * kHeadDim, kHidden},
            {"self_attn.k_proj", kKv * kHeadDim, kHidden},
            {"self_attn.v_proj", kKv * kHeadDim, kHidden},
            {"self_attn.o_proj", kHidden, kHeads * kHeadDim},
            {"mlp.gate_proj", kInter, kHidden},
            {"mlp.up_proj", kInter, kHidden},
            {"mlp.down_proj", kHidden, kInter}};
  }

  void Put(const std::string& name, const std::string& dtype, std::vector<int64_t> shape, int64_t elem_size) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    tensors[name] = StTensor{name, dtype, shape, std::string(static_cast<size_t>(n * elem_size), '\x11')};
  }
  void Dense(const std::string& name, std::vector<int64_t> shape) { Put(name, "BF16", std::move(shape), 2); }

  // Replaces every decoder linear's weight with W4A16 group-16 tensors (content arbitrary).
  void PackInt4Group16(bool asym) {
    for (int64_t l = 0; l < kLayers; ++l) {
      for (const auto& [name, out, in] : Linears()) {
        const std::string m = "model.layers." + std::to_string(l) + "." + name;
        tensors.erase(m + ".weight");
        Put(m + ".weight_packed", "I32", {out, in / 8}, 4);
        Put(m + ".weight_scale", "BF16", {out, in / 16}, 2);
        std::vector<int64_t> shape_vals = {out, in};
        tensors[m + ".weight_shape"] =
            StTensor{m + ".weight_shape", "I64", {2}, testing_util::Bytes(shape_vals)};
        if (asym) Put(m + ".weight_zero_point", "I32", {out / 8, in / 16}, 4);
      }
    }
    config["quantization_config"] = nlohmann::json::parse(std::string(R"({
      "quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int",
        "strategy": "group", "group_size": 16, "symmetric": )") +
                                                          (asym ? "false" : "true") + "}}}}");
  }

  void Nvfp4(bool w4a4) {
    for (int64_t l = 0; l < kLayers; ++l) {
      for (const auto& [name, out, in] : Linears()) {
        const std::string m = "model.layers." + std::to_string(l) + "." + name;
        tensors.erase(m + ".weight");
        Put(m + ".weight_packed", "U8", {out, in / 2}, 1);
        Put(m + ".weight_scale", "F8_E4M3", {out, in / 16}, 1);
        tensors[m + ".weight_global_scale"] =
            StTensor{m + ".weight_global_scale", "F32", {1}, testing_util::Bytes(std::vector<float>{100.0f})};
        if (w4a4) Put(m + ".input_global_scale", "F32", {1}, 4);
      }
    }
    const char* acts = w4a4 ? R"(, "input_activations": {"num_bits": 4, "type": "float",
        "strategy": "tensor_group", "group_size": 16, "dynamic": "local"})"
                            : "";
    config["quantization_config"] = nlohmann::json::parse(std::string(R"({
      "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "ignore": ["lm_head"],
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float",
        "strategy": "tensor_group", "group_size": 16})") + acts +
                                                          "}}}");
  }

  // Replaces every decoder linear's weight with MXFP4A16 tensors: packed E2M1 and E8M0 scale bytes 127 (1.0).
  void Mxfp4() {
    for (int64_t l = 0; l < kLayers; ++l) {
      for (const auto& [name, out, in] : Linears()) {
        const std::string m = "model.layers." + std::to_string(l) + "." + name;
        tensors.erase(m + ".weight");
        Put(m + ".weight_packed", "U8", {out, in / 2}, 1);
        tensors[m + ".weight_scale"] = StTensor{m + ".weight_scale",
                                                "U8",
                                                {out, in / 32},
                                                std::string(static_cast<size_t>(out * in / 32), '\x7f')};
      }
    }
    config["quantization_config"] = nlohmann::json::parse(R"({
      "quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized", "ignore": ["lm_head"],
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float",
        "strategy": "group", "group_size": 32, "scale_dtype": "torch.uint8"}}}})");
  }

  // Stores every decoder linear's BF16 weight as sparse-24-bitmask: shape, compressed [out, in/2] and a
  // bitmask keeping columns 0, 1 of every 4 (bytes 0x33), under a sparsity-only quantization_config.
  void Sparse24() {
    for (int64_t l = 0; l < kLayers; ++l) {
      for (const auto& [name, out, in] : Linears()) {
        const std::string m = "model.layers." + std::to_string(l) + "." + name;
        tensors.erase(m + ".weight");
        std::vector<int64_t> shape_vals = {out, in};
        tensors[m + ".shape"] = StTensor{m + ".shape", "I64", {2, 1}, testing_util::Bytes(shape_vals)};
        Put(m + ".compressed", "BF16", {out, in / 2}, 2);
        tensors[m + ".bitmask"] = StTensor{
            m + ".bitmask", "U8", {out, in / 8}, std::string(static_cast<size_t>(out * in / 8), '\x33')};
      }
    }
    config["quantization_config"] = nlohmann::json::parse(R"({"quant_method": "compressed-tensors",
      "sparsity_config": {"format": "sparse-24-bitmask", "sparsity_structure": "2:4", "targets": ["Linear"],
        "ignore": ["lm_head"], "global_sparsity": 0.5}})");
  }

  // Replaces every decoder linear's weight with INT8 W8A8 static tensors: int8 channel weights, a per-tensor
  // input_scale of `input_scale`, and an int8 input_zero_point when asymmetric.
  void Int8Static(bool asym, float input_scale) {
    for (int64_t l = 0; l < kLayers; ++l) {
      for (const auto& [name, out, in] : Linears()) {
        const std::string m = "model.layers." + std::to_string(l) + "." + name;
        Put(m + ".weight", "I8", {out, in}, 1);
        Put(m + ".weight_scale", "BF16", {out, 1}, 2);
        tensors[m + ".input_scale"] =
            StTensor{m + ".input_scale", "F32", {1}, testing_util::Bytes(std::vector<float>{input_scale})};
        if (asym) tensors[m + ".input_zero_point"] = StTensor{m + ".input_zero_point", "I8", {1}, "\xfb"};
      }
    }
    config["quantization_config"] = nlohmann::json::parse(std::string(R"({
      "quant_method": "compressed-tensors", "format": "int-quantized", "ignore": ["lm_head"],
      "config_groups": {"group_0": {"targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": true},
        "input_activations": {"num_bits": 8, "type": "int", "strategy": "tensor", "dynamic": false,
          "symmetric": )") + (asym ? "false" : "true") + "}}}}");
  }

  absl::StatusOr<std::unique_ptr<ModelWeights>> WriteAndLoad(const TempDir& dir) const {
    std::vector<StTensor> list;
    for (const auto& [name, t] : tensors) list.push_back(t);
    if (!testing_util::WriteSafetensors(dir.path() + "/model.safetensors", list) ||
        !testing_util::WriteFile(dir.path() + "/config.json", config.dump(2))) {
      return absl::InternalError("cannot write the test model");
    }
    return ModelWeights::Load(dir.path());
  }
};

TEST(WeightsTest, TinyDenseLoadsAndSummarizes) {
  TempDir dir;
  TinyModel t;
  auto m = t.WriteAndLoad(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->summary().format, "dense-bf16");
  EXPECT_EQ((*m)->lm_head().weight.name, "lm_head.weight");
  EXPECT_DOUBLE_EQ((*m)->summary().bits_per_weight_decoder, 16.0);
}

TEST(WeightsTest, ShapeMismatchNamesTensorExpectedAndActual) {
  TempDir dir;
  TinyModel t;
  t.Dense("model.layers.1.self_attn.k_proj.weight", {32, 32});
  auto m = t.WriteAndLoad(dir);
  ASSERT_FALSE(m.ok());
  const std::string msg(m.status().message());
  EXPECT_THAT(msg, HasSubstr("model.layers.1.self_attn.k_proj.weight"));
  EXPECT_THAT(msg, HasSubstr("[32, 32]"));
  EXPECT_THAT(msg, HasSubstr("expected [16, 32]"));
  EXPECT_THAT(msg, HasSubstr("model.safetensors"));
}

TEST(WeightsTest, MissingTensorIsNotFoundNamingIt) {
  TempDir dir;
  TinyModel t;
  t.tensors.erase("model.layers.1.mlp.up_proj.weight");
  auto m = t.WriteAndLoad(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("model.layers.1.mlp.up_proj.weight"));
}

TEST(WeightsTest, WrongDtypeNamesIt) {
  TempDir dir;
  TinyModel t;
  t.Put("model.norm.weight", "I32", {TinyModel::kHidden}, 4);
  auto m = t.WriteAndLoad(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("model.norm.weight' has dtype I32"));
}

TEST(WeightsTest, UnexpectedTensorFails) {
  TempDir dir;
  TinyModel t;
  t.Dense("model.layers.0.self_attn.o_proj.bias", {TinyModel::kHidden});
  auto m = t.WriteAndLoad(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("model.layers.0.self_attn.o_proj.bias"));
  // A rotary inv_freq buffer from older exports is tolerated.
  TempDir dir2;
  TinyModel t2;
  t2.Put("model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {4}, 4);
  EXPECT_TRUE(t2.WriteAndLoad(dir2).ok());
}

TEST(WeightsTest, TiedEmbeddingsIgnoreStoredLmHead) {
  TempDir dir;
  TinyModel t;
  t.config["tie_word_embeddings"] = true;
  auto m = t.WriteAndLoad(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->lm_head().weight.name, "model.embed_tokens.weight");
}

TEST(WeightsTest, Qwen2BiasAndQwen3QkNorm) {
  TempDir dir;
  TinyModel q2("Qwen2ForCausalLM", "qwen2");
  auto missing = q2.WriteAndLoad(dir);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("model.layers.0.self_attn.q_proj.bias"));
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    q2.Dense(p + "q_proj.bias", {32});
    q2.Dense(p + "k_proj.bias", {16});
    q2.Dense(p + "v_proj.bias", {16});
  }
  auto m = q2.WriteAndLoad(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->layers()[1].k_proj.bias.shape, (std::vector<int64_t>{16}));
  EXPECT_FALSE((*m)->layers()[1].o_proj.bias.present());
  // Qwen2 adds q/k/v biases (32 + 16 + 16 per layer), Qwen3 q/k norms (8 + 8 per layer).
  const int64_t dense_params = (*m)->summary().num_parameters;

  TempDir dir3;
  TinyModel q3("Qwen3ForCausalLM", "qwen3");
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    q3.Dense(p + "q_norm.weight", {TinyModel::kHeadDim});
    q3.Dense(p + "k_norm.weight", {TinyModel::kHeadDim});
  }
  auto m3 = q3.WriteAndLoad(dir3);
  ASSERT_TRUE(m3.ok()) << m3.status();
  EXPECT_TRUE((*m3)->layers()[0].q_norm.present());
  EXPECT_EQ((*m3)->summary().num_parameters + 2 * 64 - 2 * 2 * 8, dense_params);
}

TEST(WeightsTest, PackQuantizedSymAndAsym) {
  for (bool asym : {false, true}) {
    TempDir dir;
    TinyModel t;
    t.PackInt4Group16(asym);
    auto m = t.WriteAndLoad(dir);
    ASSERT_TRUE(m.ok()) << m.status();
    const LinearWeight& q = (*m)->layers()[0].q_proj;
    EXPECT_EQ(q.format, WeightFormat::kPackQuantized);
    EXPECT_EQ(q.group_size, 16);
    EXPECT_EQ(q.weight_zero_point.present(), asym);
    EXPECT_EQ((*m)->lm_head().format, WeightFormat::kDense);
    const ModelSummary& s = (*m)->summary();
    EXPECT_EQ(s.format, asym ? "w4a16-g16-asym" : "w4a16-g16-sym");
    // 4 bits + a bf16 scale per 16 weights (+ a 4-bit zero point per 16 when asymmetric).
    EXPECT_NEAR(s.bits_per_weight_decoder, asym ? 4.0 + 1.0 + 0.25 : 5.0, 1e-9);
    EXPECT_DOUBLE_EQ(s.bits_per_weight_head, 16.0);
    EXPECT_THAT(s.notes, HasSubstr("lm_head dense-bf16"));
  }
}

TEST(WeightsTest, PackQuantizedBadShapes) {
  TempDir dir;
  TinyModel t;
  t.PackInt4Group16(false);
  t.Put("model.layers.1.mlp.down_proj.weight_scale", "BF16", {32, 3}, 2);
  auto m = t.WriteAndLoad(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("model.layers.1.mlp.down_proj.weight_scale"));
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("expected [32, 4]"));

  TinyModel t2;
  t2.PackInt4Group16(false);
  t2.tensors["model.layers.0.mlp.up_proj.weight_shape"].bytes =
      testing_util::Bytes(std::vector<int64_t>{64, 31});
  auto m2 = t2.WriteAndLoad(dir);
  ASSERT_FALSE(m2.ok());
  EXPECT_THAT(std::string(m2.status().message()),
              HasSubstr("weight_shape' holds [64, 31], expected [64, 32]"));
}

TEST(WeightsTest, Nvfp4W4A4IsRunWeightOnlyWithANote) {
  TempDir dir;
  TinyModel t;
  t.Nvfp4(true);
  auto m = t.WriteAndLoad(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  const LinearWeight& g = (*m)->layers()[1].gate_proj;
  EXPECT_EQ(g.format, WeightFormat::kNvfp4PackQuantized);
  EXPECT_TRUE(g.w4a4_run_weight_only);
  EXPECT_TRUE(g.input_global_scale.present());
  EXPECT_EQ((*m)->summary().format, "nvfp4a16");
  EXPECT_THAT((*m)->summary().notes, HasSubstr("W4A4 checkpoint run weight-only"));
  // 4 bits + an 8-bit scale per 16 + two fp32 global scales per linear.
  EXPECT_GT((*m)->summary().bits_per_weight_decoder, 4.5);
  EXPECT_LT((*m)->summary().bits_per_weight_decoder, 4.6);

  TempDir dir2;
  TinyModel a16;
  a16.Nvfp4(false);
  auto m2 = a16.WriteAndLoad(dir2);
  ASSERT_TRUE(m2.ok()) << m2.status();
  EXPECT_FALSE((*m2)->layers()[0].q_proj.w4a4_run_weight_only);
  EXPECT_THAT((*m2)->summary().notes, ::testing::Not(HasSubstr("W4A4")));
}

TEST(WeightsTest, Mxfp4LoadsAndRefusesTheE8M0NanCode) {
  TempDir dir;
  TinyModel t;
  t.Mxfp4();
  auto m = t.WriteAndLoad(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  const LinearWeight& d = (*m)->layers()[1].down_proj;
  EXPECT_EQ(d.format, WeightFormat::kMxfp4PackQuantized);
  EXPECT_EQ(d.group_size, 32);
  EXPECT_EQ((*m)->summary().format, "mxfp4a16");
  // 4 bits + an 8-bit scale per 32.
  EXPECT_DOUBLE_EQ((*m)->summary().bits_per_weight_decoder, 4.25);
  // Byte 0x11: nibbles 1 (0.5) twice, times 2^(127 - 127).
  std::vector<float> row(static_cast<size_t>(d.in_features));
  ASSERT_TRUE(d.DequantizeRows(3, 4, row.data()).ok());
  EXPECT_EQ(row[0], 0.5f);
  EXPECT_EQ(row[63], 0.5f);

  // 255 is E8M0's NaN code; compressed-tensors decodes it to 2^128 = infinity.
  TempDir dir2;
  TinyModel bad;
  bad.Mxfp4();
  bad.tensors["model.layers.0.mlp.gate_proj.weight_scale"].bytes[9] = '\xff';
  auto m2 = bad.WriteAndLoad(dir2);
  ASSERT_FALSE(m2.ok());
  EXPECT_EQ(m2.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(m2.status().message()),
      HasSubstr("'model.layers.0.mlp.gate_proj.weight_scale' holds the E8M0 NaN code 255 at index 9"));
}

TEST(WeightsTest, Sparse24IsDecompressedAtLoad) {
  TempDir dir;
  TinyModel t;
  t.Sparse24();
  auto m = t.WriteAndLoad(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  const LinearWeight& o = (*m)->layers()[0].o_proj;
  EXPECT_EQ(o.format, WeightFormat::kDense);
  EXPECT_EQ(o.weight.dtype, DType::kBF16);
  EXPECT_EQ(o.weight.shape,
            (std::vector<int64_t>{TinyModel::kHidden, TinyModel::kHeads * TinyModel::kHeadDim}));
  // Columns 0, 1 of every 4 hold the stored BF16 0x1111, columns 2, 3 zero.
  std::vector<float> row(static_cast<size_t>(o.in_features));
  ASSERT_TRUE(o.DequantizeRows(5, 6, row.data()).ok());
  for (size_t k = 0; k < row.size(); ++k) EXPECT_EQ(row[k], k % 4 < 2 ? Bf16ToFloat(0x1111) : 0.0f) << k;
  EXPECT_EQ((*m)->summary().format, "dense-bf16");
  EXPECT_THAT((*m)->summary().notes,
              HasSubstr("2:4 sparse (sparse-24-bitmask): 14 linears decompressed at load"));
  EXPECT_DOUBLE_EQ((*m)->summary().bits_per_weight_decoder, 16.0);

  // A bitmask with one bit too many for the stored values fails naming it.
  TempDir dir2;
  TinyModel bad;
  bad.Sparse24();
  bad.tensors["model.layers.1.mlp.up_proj.bitmask"].bytes[2] = '\x37';
  auto m2 = bad.WriteAndLoad(dir2);
  ASSERT_FALSE(m2.ok());
  EXPECT_THAT(std::string(m2.status().message()), HasSubstr("model.layers.1.mlp.up_proj.bitmask"));
  EXPECT_THAT(std::string(m2.status().message()), HasSubstr("set bits for"));
}

// Static activation scales: input_scale (and input_zero_point when asymmetric) are loaded with their linear;
// a missing, zero or non-finite one fails at load naming the tensor.
TEST(WeightsTest, StaticInputScalesLoadAndAreChecked) {
  for (const bool asym : {false, true}) {
    TempDir dir;
    TinyModel t;
    t.Int8Static(asym, 0.0625f);
    auto m = t.WriteAndLoad(dir);
    ASSERT_TRUE(m.ok()) << m.status();
    const LinearWeight& k = (*m)->layers()[1].k_proj;
    EXPECT_TRUE(k.static_input_int8);
    EXPECT_FALSE(k.static_input_fp8 || k.w8a8_dynamic_int8);
    EXPECT_EQ(k.act_symmetric, !asym);
    ASSERT_TRUE(k.input_scale.present());
    float scale = 0.0f;
    ASSERT_TRUE(TensorToFloat(k.input_scale, &scale, 1).ok());
    EXPECT_EQ(scale, 0.0625f);
    EXPECT_EQ(k.input_zero_point.present(), asym);
    if (asym) {
      EXPECT_EQ(static_cast<int8_t>(k.input_zero_point.data[0]), -5);
    }
    EXPECT_EQ((*m)->summary().format,
              asym ? "int8-w8a8-channel-sym-act-asym-act-static" : "int8-w8a8-channel-sym-act-static");
  }
  for (const float bad : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN()}) {
    TempDir dir;
    TinyModel t;
    t.Int8Static(false, bad);
    auto m = t.WriteAndLoad(dir);
    ASSERT_FALSE(m.ok()) << bad;
    EXPECT_THAT(std::string(m.status().message()), HasSubstr("input_scale' is "));
    EXPECT_THAT(std::string(m.status().message()), HasSubstr("expected a finite scale > 0"));
  }
  TempDir dir;
  TinyModel t;
  t.Int8Static(true, 0.5f);
  t.tensors.erase("model.layers.0.mlp.up_proj.input_zero_point");
  auto m = t.WriteAndLoad(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("model.layers.0.mlp.up_proj.input_zero_point"));
}

// A corrupted checkpoint with a NaN or an infinity in a quantization parameter, a norm or a bias used to
// load and serve NaN log-probabilities; each is refused at load, naming the file, the tensor and the index.
TEST(WeightsTest, NonFiniteScalesNormsAndBiasesAreRefusedNamingTheTensor) {
  struct Case {
    std::string what;
    std::function<void(TinyModel*)> apply;
    std::vector<std::string> fragments;
  };
  auto set_u16 = [](StTensor* t, size_t index, uint16_t bits) {
    std::memcpy(&t->bytes[index * 2], &bits, 2);
  };
  const std::vector<Case> cases = {
      {"bf16 NaN in a group scale",
       [&](TinyModel* m) {
         m->PackInt4Group16(false);
         set_u16(&m->tensors["model.layers.1.mlp.up_proj.weight_scale"], 5, 0x7fc0);
       },
       {"tensor 'model.layers.1.mlp.up_proj.weight_scale' holds a NaN or an infinity at index 5 (BF16)",
        "a quantization scale must be finite"}},
      {"bf16 -inf in a group scale",
       [&](TinyModel* m) {
         m->PackInt4Group16(true);
         set_u16(&m->tensors["model.layers.0.self_attn.k_proj.weight_scale"], 0, 0xff80);
       },
       {"'model.layers.0.self_attn.k_proj.weight_scale' holds a NaN or an infinity at index 0"}},
      {"fp8 NaN in an nvfp4 block scale",
       [&](TinyModel* m) {
         m->Nvfp4(false);
         m->tensors["model.layers.0.mlp.down_proj.weight_scale"].bytes[7] = '\x7f';
       },
       {"'model.layers.0.mlp.down_proj.weight_scale' holds a NaN or an infinity at index 7 (F8_E4M3)"}},
      {"inf nvfp4 global scale",
       [&](TinyModel* m) {
         m->Nvfp4(false);
         m->tensors["model.layers.1.self_attn.o_proj.weight_global_scale"].bytes =
             testing_util::Bytes(std::vector<float>{std::numeric_limits<float>::infinity()});
       },
       {"'model.layers.1.self_attn.o_proj.weight_global_scale' holds a NaN or an infinity at index 0 (F32)",
        "a global scale must be finite"}},
      {"zero nvfp4 global scale",
       [&](TinyModel* m) {
         m->Nvfp4(false);
         m->tensors["model.layers.1.self_attn.o_proj.weight_global_scale"].bytes =
             testing_util::Bytes(std::vector<float>{0.0f});
       },
       {"'model.layers.1.self_attn.o_proj.weight_global_scale' is 0"}},
      {"NaN in a norm weight",
       [&](TinyModel* m) {
         set_u16(&m->tensors["model.layers.1.post_attention_layernorm.weight"], 31, 0x7fc1);
       },
       {"'model.layers.1.post_attention_layernorm.weight' holds a NaN or an infinity at index 31",
        "a norm weight must be finite"}},
      {"NaN in the final norm",
       [&](TinyModel* m) { set_u16(&m->tensors["model.norm.weight"], 2, 0xffc0); },
       {"'model.norm.weight' holds a NaN or an infinity at index 2"}},
  };
  for (const Case& c : cases) {
    TempDir dir;
    TinyModel t;
    c.apply(&t);
    auto m = t.WriteAndLoad(dir);
    ASSERT_FALSE(m.ok()) << c.what;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(std::string(m.status().message()), HasSubstr(dir.path() + "/model.safetensors")) << c.what;
    for (const std::string& f : c.fragments)
      EXPECT_THAT(std::string(m.status().message()), HasSubstr(f)) << c.what;
  }
  // Finite extremes pass (the largest finite bf16, fp8 448, a negative scale), and dense weight values are
  // not scanned: a NaN there is caught per request at scoring time.
  TempDir dir;
  TinyModel t;
  t.PackInt4Group16(false);
  set_u16(&t.tensors["model.layers.0.mlp.gate_proj.weight_scale"], 0, 0x7f7f);
  set_u16(&t.tensors["model.layers.0.mlp.gate_proj.weight_scale"], 1, 0xc000);
  set_u16(&t.tensors["lm_head.weight"], 3, 0x7fc0);
  auto ok = t.WriteAndLoad(dir);
  EXPECT_TRUE(ok.ok()) << ok.status();
  TempDir dir2;
  TinyModel f8;
  f8.Nvfp4(false);
  f8.tensors["model.layers.0.mlp.down_proj.weight_scale"].bytes[7] = '\x7e';  // 448, E4M3's largest
  auto ok2 = f8.WriteAndLoad(dir2);
  EXPECT_TRUE(ok2.ok()) << ok2.status();
}

TEST(WeightsTest, UnsupportedQuantizationFailsAtLoad) {
  TempDir dir;
  TinyModel t;
  t.config["quantization_config"] = nlohmann::json::parse(R"({"quant_method": "compressed-tensors",
    "sparsity_config": {"format": "sparse-24-bitmask", "targets": ["Linear"]}})");
  auto m = t.WriteAndLoad(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("sparse-24-bitmask"));
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("config.json"));
}

}  // namespace
}  // namespace scored

namespace scored {
namespace {

// Phi-3's fused modules (tests/fixtures/phi3-w4a16-g32: int4, group-32 BF16 scales): the loader's q/k/v and
// gate/up views decode to exactly the rows of the stored fused tensor, decoded whole.
TEST(WeightsTest, Phi3FusedModulesSplitByRows) {
  auto m = ModelWeights::Load(std::string(SCORED_FIXTURES_DIR) + "/phi3-w4a16-g32");
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  const LayerWeights& L = (*m)->layers()[1];
  struct Fused {
    std::string module;
    std::vector<const LinearWeight*> parts;
  };
  const std::vector<Fused> fused = {
      {"model.layers.1.self_attn.qkv_proj", {&L.q_proj, &L.k_proj, &L.v_proj}},
      {"model.layers.1.mlp.gate_up_proj", {&L.gate_proj, &L.up_proj}},
  };
  EXPECT_EQ(L.q_proj.out_features, c.num_heads * c.head_dim);
  EXPECT_EQ(L.k_proj.out_features, c.num_kv_heads * c.head_dim);
  EXPECT_EQ(L.up_proj.out_features, c.intermediate_size);
  EXPECT_EQ(L.k_proj.module, "model.layers.1.self_attn.qkv_proj[k]");
  for (const Fused& f : fused) {
    SCOPED_TRACE(f.module);
    // The whole fused weight: the q part's description over the full stored tensors.
    LinearWeight whole = *f.parts[0];
    auto packed = (*m)->store().Get(f.module + ".weight_packed");
    auto scale = (*m)->store().Get(f.module + ".weight_scale");
    ASSERT_TRUE(packed.ok() && scale.ok());
    whole.weight_packed = *packed;
    whole.weight_scale = *scale;
    whole.out_features = packed->shape[0];
    std::vector<float> all(whole.out_features * whole.in_features);
    ASSERT_TRUE(whole.DequantizeRows(0, whole.out_features, all.data()).ok());
    int64_t row = 0;
    for (const LinearWeight* part : f.parts) {
      EXPECT_EQ(part->format, WeightFormat::kPackQuantized);
      std::vector<float> got(part->out_features * part->in_features);
      ASSERT_TRUE(part->DequantizeRows(0, part->out_features, got.data()).ok());
      const std::vector<float> want(all.begin() + row * whole.in_features,
                                    all.begin() + (row + part->out_features) * whole.in_features);
      EXPECT_EQ(got, want) << part->module;
      row += part->out_features;
    }
    EXPECT_EQ(row, whole.out_features);
  }
}

}  // namespace
}  // namespace scored

namespace scored {
namespace {

using testing_util::Bytes;
using testing_util::StTensor;
using testing_util::TempDir;
using testing_util::WriteFile;
using testing_util::WriteSafetensors;

// Gemma3ForConditionalGeneration: the gemma3-w4a16-g32 fixture's tensors under either saved layout of the
// vision-language class (transformers 5 "model.language_model.*", transformers 4 / llm-compressor 0.14
// "language_model.model.*"), next to a vision-tower tensor, with the config nested as text_config, load to
// the same language model; the vision tower is left unread and the summary says so.
TEST(WeightsTest, Gemma3ConditionalGenerationReadsTheLanguageModel) {
  const std::string src = std::string(SCORED_FIXTURES_DIR) + "/gemma3-w4a16-g32";
  auto base = ModelWeights::Load(src);
  ASSERT_TRUE(base.ok()) << base.status();
  std::ifstream in(src + "/config.json");
  nlohmann::json text = nlohmann::json::parse(in);
  nlohmann::json top;
  top["architectures"] = {"Gemma3ForConditionalGeneration"};
  top["model_type"] = "gemma3";
  top["quantization_config"] = text["quantization_config"];
  top["vision_config"] = {{"hidden_size", 2}, {"model_type", "siglip_vision_model"}};
  text.erase("quantization_config");
  text.erase("architectures");
  text["model_type"] = "gemma3_text";
  top["text_config"] = text;
  struct Layout {
    std::string language, vision;
  };
  for (const Layout& layout : {Layout{"model.language_model.", "model.vision_tower."},
                               Layout{"language_model.model.", "vision_tower."}}) {
    SCOPED_TRACE(layout.language);
    TempDir dir;
    std::vector<StTensor> tensors;
    for (const std::string& name : (*base)->store().Names()) {
      absl::StatusOr<TensorView> view = (*base)->store().Get(name);
      ASSERT_TRUE(view.ok()) << view.status();
      const TensorView& t = *view;
      ASSERT_EQ(name.rfind("model.", 0), 0u) << name;
      tensors.push_back({layout.language + name.substr(6), DTypeName(t.dtype), t.shape,
                         std::string(reinterpret_cast<const char*>(t.data), t.nbytes)});
    }
    tensors.push_back(
        {layout.vision + "encoder.layers.0.mlp.fc1.weight", "F32", {2, 2}, Bytes(std::vector<float>(4))});
    ASSERT_TRUE(WriteSafetensors(dir.path() + "/model.safetensors", tensors));
    ASSERT_TRUE(WriteFile(dir.path() + "/config.json", top.dump()));
    auto m = ModelWeights::Load(dir.path());
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ((*m)->config().architecture, "Gemma3ForConditionalGeneration");
    EXPECT_EQ((*m)->config().layer_window, (*base)->config().layer_window);
    EXPECT_THAT((*m)->summary().notes, ::testing::HasSubstr("the vision tower (1 tensors) is not loaded"));
    const LinearWeight& a = (*m)->layers()[2].down_proj;
    const LinearWeight& b = (*base)->layers()[2].down_proj;
    std::vector<float> wa(a.NumElements()), wb(b.NumElements());
    ASSERT_TRUE(a.DequantizeRows(0, a.out_features, wa.data()).ok());
    ASSERT_TRUE(b.DequantizeRows(0, b.out_features, wb.data()).ok());
    EXPECT_EQ(wa, wb);
    EXPECT_EQ((*m)->layers()[1].q_norm.name, layout.language + "layers.1.self_attn.q_norm.weight");
  }
}

}  // namespace
}  // namespace scored

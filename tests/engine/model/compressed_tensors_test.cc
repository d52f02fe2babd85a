#include "engine/model/compressed_tensors.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "engine/model/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace scored {
namespace {

using ::testing::HasSubstr;

const std::string kConfigs = std::string(SCORED_DATA_DIR) + "/models-configs";

ModuleScheme Resolve(const CompressedTensorsConfig& c, const std::string& module) {
  auto s = ResolveModuleScheme(c, module);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : ModuleScheme();
}

// As llm-compressor writes a W4A16 (GPTQ, group 128) checkpoint.
constexpr char kW4A16[] = R"({
  "config_groups": {"group_0": {
    "format": "pack-quantized",
    "input_activations": null, "output_activations": null,
    "targets": ["Linear"],
    "weights": {"actorder": null, "block_structure": null, "dynamic": false, "group_size": 128,
                "num_bits": 4, "observer": "minmax", "observer_kwargs": {}, "strategy": "group",
                "symmetric": true, "type": "int"}}},
  "format": "pack-quantized", "global_compression_ratio": null, "ignore": ["lm_head"],
  "kv_cache_scheme": null, "quant_method": "compressed-tensors", "quantization_status": "compressed",
  "sparsity_config": {}, "transform_config": {}, "version": "0.12.2"})";

TEST(CompressedTensorsTest, W4A16Group128) {
  auto c = ParseCompressedTensorsConfig(kW4A16, "cfg");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->groups.size(), 1u);
  const ModuleScheme q = Resolve(*c, "model.layers.0.self_attn.q_proj");
  EXPECT_TRUE(q.quantized);
  EXPECT_EQ(q.format, WeightFormat::kPackQuantized);
  EXPECT_EQ(q.num_bits, 4);
  EXPECT_TRUE(q.symmetric);
  EXPECT_EQ(q.strategy, QuantStrategy::kGroup);
  EXPECT_EQ(q.group_size, 128);
  EXPECT_FALSE(q.actorder_group);
  EXPECT_EQ(q.group, "group_0");
  const ModuleScheme head = Resolve(*c, "lm_head");
  EXPECT_FALSE(head.quantized);
  EXPECT_EQ(head.format, WeightFormat::kDense);
}

TEST(CompressedTensorsTest, AsymmetricActorderGroupAndLegacyTrue) {
  for (const char* actorder : {"\"group\"", "true"}) {
    const std::string cfg = std::string(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
      "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int",
      "symmetric": false, "strategy": "group", "group_size": 32, "actorder": )") +
                            actorder + "}}}}";
    auto c = ParseCompressedTensorsConfig(cfg, "cfg");
    ASSERT_TRUE(c.ok()) << c.status();
    const ModuleScheme s = Resolve(*c, "model.layers.3.mlp.down_proj");
    EXPECT_TRUE(s.actorder_group);
    EXPECT_FALSE(s.symmetric);
    EXPECT_EQ(s.group_size, 32);
  }
  // actorder "weight" changes calibration only: no g_idx.
  auto w = ParseCompressedTensorsConfig(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
      "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int",
      "strategy": "channel", "actorder": "weight"}}}})",
                                        "cfg");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE(Resolve(*w, "lm_head").actorder_group);
  EXPECT_EQ(Resolve(*w, "lm_head").strategy, QuantStrategy::kChannel);
  EXPECT_EQ(Resolve(*w, "lm_head").num_bits, 8);
}

TEST(CompressedTensorsTest, Nvfp4W4A4RunsWeightOnly) {
  auto c = ParseCompressedTensorsConfig(R"({
    "config_groups": {"group_0": {
      "input_activations": {"dynamic": "local", "group_size": 16, "num_bits": 4, "strategy": "tensor_group",
                            "symmetric": true, "type": "float"},
      "targets": ["Linear"],
      "weights": {"dynamic": false, "group_size": 16, "num_bits": 4, "strategy": "tensor_group",
                  "symmetric": true, "type": "float"}}},
    "format": "nvfp4-pack-quantized", "ignore": ["lm_head"], "quant_method": "compressed-tensors",
    "quantization_status": "compressed"})",
                                        "cfg");
  ASSERT_TRUE(c.ok()) << c.status();
  const ModuleScheme s = Resolve(*c, "model.layers.0.mlp.up_proj");
  EXPECT_EQ(s.format, WeightFormat::kNvfp4PackQuantized);
  EXPECT_EQ(s.group_size, 16);
  EXPECT_TRUE(s.w4a4_run_weight_only);
}

// As llm-compressor 0.14 writes MXFP4A16 (tests/fixtures/llama-mxfp4a16); its MXFP4 (W4A4) scheme adds
// dynamic FP4 group-32 activations, which scored refuses naming the field.
TEST(CompressedTensorsTest, Mxfp4WeightsResolveAndW4A4IsRefused) {
  constexpr char kWeights[] = R"("weights": {"dynamic": false, "group_size": 32, "num_bits": 4,
      "observer": "memoryless_minmax", "scale_dtype": "torch.uint8", "strategy": "group", "symmetric": true,
      "type": "float", "zp_dtype": null})";
  auto c = ParseCompressedTensorsConfig(
      std::string(R"({"config_groups": {"group_0": {"format": "mxfp4-pack-quantized",
      "input_activations": null, "output_activations": null, "targets": ["Linear"], )") +
          kWeights + R"(}}, "format": "mxfp4-pack-quantized", "ignore": ["lm_head"],
      "kv_cache_scheme": null, "quant_method": "compressed-tensors", "quantization_status": "compressed",
      "sparsity_config": {}, "transform_config": {}, "version": "0.19.0"})",
      "cfg");
  ASSERT_TRUE(c.ok()) << c.status();
  const ModuleScheme s = Resolve(*c, "model.layers.1.self_attn.o_proj");
  EXPECT_EQ(s.format, WeightFormat::kMxfp4PackQuantized);
  EXPECT_EQ(s.strategy, QuantStrategy::kGroup);
  EXPECT_EQ(s.group_size, 32);
  EXPECT_EQ(s.num_bits, 4);
  EXPECT_FALSE(s.w4a4_run_weight_only || s.w8a8_dynamic_fp8 || s.w8a8_dynamic_int8);

  auto w4a4 = ParseCompressedTensorsConfig(
      std::string(R"({"config_groups": {"group_0": {"format": "mxfp4-pack-quantized",
      "input_activations": {"dynamic": true, "group_size": 32, "num_bits": 4, "scale_dtype": "torch.uint8",
      "strategy": "group", "symmetric": true, "type": "float"}, "targets": ["Linear"], )") +
          kWeights + R"(}}, "format": "mxfp4-pack-quantized", "quant_method": "compressed-tensors"})",
      "cfg");
  ASSERT_FALSE(w4a4.ok());
  EXPECT_EQ(w4a4.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(w4a4.status().message()), HasSubstr("group 'group_0' input_activations"));
  EXPECT_THAT(std::string(w4a4.status().message()), HasSubstr("mxfp4-pack-quantized"));

  auto group16 = ParseCompressedTensorsConfig(R"({"quant_method": "compressed-tensors",
      "format": "mxfp4-pack-quantized", "config_groups": {"g": {"targets": ["Linear"],
      "weights": {"num_bits": 4, "type": "float", "strategy": "group", "group_size": 16}}}})",
                                              "cfg");
  ASSERT_FALSE(group16.ok());
  EXPECT_THAT(std::string(group16.status().message()), HasSubstr("mxfp4-pack-quantized weights"));
}

TEST(CompressedTensorsTest, Fp8DynamicAndBlock) {
  auto c = ParseCompressedTensorsConfig(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true, "dynamic": false},
      "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true,
                            "symmetric": true}}},
    "ignore": ["lm_head"]})",
                                        "cfg");
  ASSERT_TRUE(c.ok()) << c.status();
  const ModuleScheme s = Resolve(*c, "model.layers.0.self_attn.o_proj");
  EXPECT_EQ(s.format, WeightFormat::kFloatQuantized);
  EXPECT_EQ(s.strategy, QuantStrategy::kChannel);
  EXPECT_TRUE(s.w8a8_dynamic_fp8);

  auto b = ParseCompressedTensorsConfig(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]}}}})",
                                        "cfg");
  ASSERT_TRUE(b.ok()) << b.status();
  const ModuleScheme sb = Resolve(*b, "lm_head");  // nothing ignored: lm_head is quantized too
  EXPECT_EQ(sb.strategy, QuantStrategy::kBlock);
  EXPECT_EQ(sb.block_rows, 128);
  EXPECT_EQ(sb.block_cols, 128);
  EXPECT_FALSE(sb.w8a8_dynamic_fp8);

  // FP8_BLOCK: block weights with dynamic per-token-group (128) activations.
  auto g = ParseCompressedTensorsConfig(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]},
      "input_activations": {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128,
                            "dynamic": true}}}})",
                                        "cfg");
  ASSERT_TRUE(g.ok()) << g.status();
  const ModuleScheme sg = Resolve(*g, "model.layers.0.mlp.up_proj");
  EXPECT_TRUE(sg.w8a8_dynamic_fp8);
  EXPECT_EQ(sg.act_group_size, 128);
  EXPECT_EQ(s.act_group_size, 0);
}

TEST(CompressedTensorsTest, NaiveAndIntQuantizedInt8) {
  for (const char* fmt : {"naive-quantized", "int-quantized"}) {
    auto c =
        ParseCompressedTensorsConfig(std::string(R"({"quant_method": "compressed-tensors", "format": ")") +
                                         fmt + R"(", "config_groups": {"g": {"targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": false}}}})",
                                     "cfg");
    ASSERT_TRUE(c.ok()) << c.status();
    const ModuleScheme s = Resolve(*c, "model.layers.0.mlp.gate_proj");
    EXPECT_EQ(s.format, WeightFormat::kNaiveQuantized) << fmt;
    EXPECT_FALSE(s.symmetric);
  }
}

// llm-compressor's W8A8 (INT8) as it writes it (tests/fixtures/stories260k-int8-w8a8/config.json), and the
// asymmetric variant (llama-trained-int8-w8a8-g128-asym): int8 weights + dynamic per-token int8 activations.
TEST(CompressedTensorsTest, Int8W8A8DynamicActivations) {
  for (const bool sym : {true, false}) {
    const std::string flag = sym ? "true" : "false";
    auto c = ParseCompressedTensorsConfig(
        R"({"quant_method": "compressed-tensors", "format": "int-quantized", "config_groups": {"group_0": {
        "format": "int-quantized", "targets": ["Linear"], "output_activations": null,
        "weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": true, "dynamic": false,
                    "group_size": null, "observer": "memoryless_minmax", "zp_dtype": null},
        "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": true,
                              "group_size": null, "observer": null, "symmetric": )" +
            flag + R"(, "zp_dtype": )" + (sym ? "null" : R"("torch.int8")") + R"(}}},
        "ignore": ["lm_head"], "quantization_status": "compressed", "sparsity_config": {},
        "transform_config": {}, "kv_cache_scheme": null})",
        "cfg");
    ASSERT_TRUE(c.ok()) << c.status();
    const ModuleScheme s = Resolve(*c, "model.layers.0.self_attn.q_proj");
    EXPECT_EQ(s.format, WeightFormat::kNaiveQuantized);
    EXPECT_EQ(s.strategy, QuantStrategy::kChannel);
    EXPECT_TRUE(s.w8a8_dynamic_int8);
    EXPECT_FALSE(s.w8a8_dynamic_fp8);
    EXPECT_EQ(s.act_symmetric, sym);
    EXPECT_FALSE(Resolve(*c, "lm_head").w8a8_dynamic_int8);
  }
}

// Static activation scales as llm-compressor writes them (tests/fixtures/llama-trained-fp8-static,
// llama-trained-int8-static, llama-trained-int8-static-asym): per-tensor, dynamic false.
TEST(CompressedTensorsTest, StaticActivationScales) {
  struct Case {
    const char* format;
    const char* weights;
    const char* acts;
    bool fp8;
    bool symmetric;
  };
  const Case cases[] = {
      {"float-quantized", R"({"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": true})",
       R"({"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": false, "symmetric": true,
           "observer": "static_minmax", "group_size": null, "scale_dtype": null, "zp_dtype": null})",
       true, true},
      {"int-quantized", R"({"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": true})",
       R"({"num_bits": 8, "type": "int", "strategy": "tensor", "dynamic": false, "symmetric": true,
           "observer": "minmax", "zp_dtype": null})",
       false, true},
      {"int-quantized", R"({"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": true})",
       R"({"num_bits": 8, "type": "int", "strategy": "tensor", "dynamic": false, "symmetric": false,
           "observer": "minmax", "zp_dtype": "torch.int8"})",
       false, false},
  };
  for (const Case& tc : cases) {
    auto c = ParseCompressedTensorsConfig(
        std::string(R"({"quant_method": "compressed-tensors", "format": ")") + tc.format +
            R"(", "config_groups": {"group_0": {"targets": ["Linear"], "weights": )" + tc.weights +
            R"(, "input_activations": )" + tc.acts + R"(}}, "ignore": ["lm_head"]})",
        "cfg");
    ASSERT_TRUE(c.ok()) << c.status();
    const ModuleScheme s = Resolve(*c, "model.layers.0.self_attn.k_proj");
    EXPECT_EQ(s.static_input_fp8, tc.fp8) << tc.acts;
    EXPECT_EQ(s.static_input_int8, !tc.fp8) << tc.acts;
    EXPECT_EQ(s.act_symmetric, tc.symmetric) << tc.acts;
    EXPECT_FALSE(s.w8a8_dynamic_fp8 || s.w8a8_dynamic_int8) << tc.acts;
    EXPECT_FALSE(Resolve(*c, "lm_head").static_input_fp8 || Resolve(*c, "lm_head").static_input_int8);
  }
}

// llm-compressor's W4AFP8 and W4A8 presets: int4 group-128 weights, which compressed-tensors writes
// int-quantized (one value per int8; tests/fixtures/llama-trained-w4afp8, -w4a8), or pack-quantized when a
// recipe asks for it, with dynamic per-token FP8 / int8 activations.
TEST(CompressedTensorsTest, Int4WeightsWithDynamic8BitActivations) {
  for (const char* format : {"int-quantized", "pack-quantized"}) {
    for (const bool fp8 : {true, false}) {
      auto c = ParseCompressedTensorsConfig(
          std::string(R"({"quant_method": "compressed-tensors", "format": ")") + format +
              R"(", "config_groups": {"group_0": {"targets": ["Linear"],
          "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": true,
                      "dynamic": false},
          "input_activations": {"num_bits": 8, "type": ")" +
              (fp8 ? "float" : "int") + R"(", "strategy": "token", "dynamic": true, "symmetric": true}}},
          "ignore": ["lm_head"]})",
          "cfg");
      ASSERT_TRUE(c.ok()) << c.status();
      const ModuleScheme s = Resolve(*c, "model.layers.1.mlp.up_proj");
      EXPECT_EQ(s.format, std::string(format) == "int-quantized" ? WeightFormat::kNaiveQuantized
                                                                 : WeightFormat::kPackQuantized);
      EXPECT_EQ(s.num_bits, 4);
      EXPECT_EQ(s.group_size, 128);
      EXPECT_EQ(s.w8a8_dynamic_fp8, fp8) << format;
      EXPECT_EQ(s.w8a8_dynamic_int8, !fp8) << format;
      EXPECT_EQ(s.act_group_size, 0);
    }
  }
}

// int8 activation variants not implemented fail at load naming the field and what it holds.
TEST(CompressedTensorsTest, Int8ActivationVariantsNotImplementedNameTheField) {
  struct Case {
    const char* name;
    const char* format;
    const char* weights;
    const char* acts;
    const char* expect;
  };
  const Case cases[] = {
      {"static_token", "int-quantized", R"({"num_bits": 8, "type": "int", "strategy": "channel"})",
       R"({"num_bits": 8, "type": "int", "strategy": "token", "dynamic": false})",
       "static input_activations (type int, 8 bits, strategy token, dynamic false)"},
      {"static_channel_asym", "int-quantized", R"({"num_bits": 8, "type": "int", "strategy": "channel"})",
       R"({"num_bits": 8, "type": "int", "strategy": "channel", "dynamic": false, "symmetric": false})",
       "static input_activations (type int, 8 bits, strategy channel, dynamic false, asymmetric)"},
      {"static_int4_weights", "pack-quantized",
       R"({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128})",
       R"({"num_bits": 8, "type": "int", "strategy": "tensor", "dynamic": false})",
       "static input_activations (type int, 8 bits, strategy tensor, dynamic false) with pack-quantized "
       "weights of type int with 4 bits"},
      {"dynamic_tensor", "int-quantized", R"({"num_bits": 8, "type": "int", "strategy": "channel"})",
       R"({"num_bits": 8, "type": "int", "strategy": "tensor", "dynamic": true})",
       "input_activations (type int, 8 bits, strategy tensor, dynamic true)"},
      {"dynamic_group", "int-quantized", R"({"num_bits": 8, "type": "int", "strategy": "channel"})",
       R"({"num_bits": 8, "type": "int", "strategy": "group", "group_size": 128, "dynamic": true})",
       "input_activations (type int, 8 bits, strategy group, dynamic true)"},
      {"w8a8_packed", "pack-quantized", R"({"num_bits": 8, "type": "int", "strategy": "channel"})",
       R"({"num_bits": 8, "type": "int", "strategy": "token", "dynamic": true})",
       "input_activations (type int, 8 bits, strategy token, dynamic true) with pack-quantized weights of "
       "type int with 8 bits"},
      {"fp8_weights", "float-quantized", R"({"num_bits": 8, "type": "float", "strategy": "channel"})",
       R"({"num_bits": 8, "type": "int", "strategy": "token", "dynamic": true})",
       "with float-quantized weights of type float with 8 bits"},
  };
  for (const Case& tc : cases) {
    auto c = ParseCompressedTensorsConfig(
        std::string(R"({"quant_method": "compressed-tensors", "format": ")") + tc.format +
            R"(", "config_groups": {"group_0": {"targets": ["Linear"],
        "weights": )" +
            tc.weights + R"(, "input_activations": )" + tc.acts + "}}}",
        "qcfg.json");
    ASSERT_FALSE(c.ok()) << tc.name;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << tc.name;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(tc.expect)) << tc.name;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("group 'group_0'")) << tc.name;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("qcfg.json")) << tc.name;
  }
}

TEST(CompressedTensorsTest, MixedPrecisionTargetsAndPriority) {
  auto c = ParseCompressedTensorsConfig(R"({
    "quant_method": "compressed-tensors", "format": "mixed-precision",
    "config_groups": {
      "attn": {"format": "float-quantized", "targets": ["re:.*self_attn\\.(q|k|v)_proj$"],
               "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"}},
      "mlp": {"format": "pack-quantized", "targets": ["re:.*mlp.*"],
              "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 64}},
      "exact": {"format": "pack-quantized", "targets": ["model.layers.1.mlp.down_proj"],
                "weights": {"num_bits": 8, "type": "int", "strategy": "channel"}},
      "rest": {"format": "nvfp4-pack-quantized", "targets": ["Linear"],
               "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}}},
    "ignore": ["lm_head", "re:model\\.layers\\.2\\..*"]})",
                                        "cfg");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(Resolve(*c, "model.layers.0.self_attn.q_proj").group, "attn");
  EXPECT_EQ(Resolve(*c, "model.layers.0.self_attn.q_proj").format, WeightFormat::kFloatQuantized);
  EXPECT_EQ(Resolve(*c, "model.layers.0.self_attn.v_proj").group, "attn");
  EXPECT_EQ(Resolve(*c, "model.layers.0.self_attn.o_proj").group, "rest");  // regex does not match o_proj
  EXPECT_EQ(Resolve(*c, "model.layers.0.self_attn.o_proj").format, WeightFormat::kNvfp4PackQuantized);
  EXPECT_EQ(Resolve(*c, "model.layers.0.mlp.down_proj").group, "mlp");
  EXPECT_EQ(Resolve(*c, "model.layers.0.mlp.down_proj").group_size, 64);
  // An exact name beats a regex, which beats a class name.
  EXPECT_EQ(Resolve(*c, "model.layers.1.mlp.down_proj").group, "exact");
  EXPECT_EQ(Resolve(*c, "model.layers.1.mlp.down_proj").num_bits, 8);
  // re.match anchors at the start only: "re:.*mlp.*" matches; ignore regex covers layer 2.
  EXPECT_FALSE(Resolve(*c, "model.layers.2.mlp.up_proj").quantized);
  EXPECT_FALSE(Resolve(*c, "lm_head").quantized);
  EXPECT_TRUE(Resolve(*c, "model.layers.12.mlp.up_proj").quantized);
}

TEST(CompressedTensorsTest, UntargetedModulesAreDense) {
  auto c = ParseCompressedTensorsConfig(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"g": {"targets": ["re:.*mlp\\..*_proj"],
      "weights": {"num_bits": 4, "type": "int", "strategy": "channel"}}}})",
                                        "cfg");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(Resolve(*c, "model.layers.0.mlp.gate_proj").quantized);
  EXPECT_FALSE(Resolve(*c, "model.layers.0.self_attn.q_proj").quantized);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A published 2:4 sparse checkpoint's config (sparsity only, no quantization groups): every Linear but
// lm_head is sparse-24-bitmask, values dense.
TEST(CompressedTensorsTest, RealSparse24ConfigResolves) {
  auto cfg = LoadModelConfig(kConfigs + "/compressed-tensors/llama2.c-stories42M-pruned2.4-compressed");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto c = ParseCompressedTensorsConfig(cfg->quantization_config_json, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->sparsity.sparse24);
  EXPECT_EQ(c->sparsity.targets, std::vector<std::string>{"Linear"});
  EXPECT_EQ(c->sparsity.ignore, std::vector<std::string>{"lm_head"});
  EXPECT_FALSE(Resolve(*c, "model.layers.0.self_attn.q_proj").quantized);
}

TEST(CompressedTensorsTest, OtherSparsityFormatsAndStructuresFailNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"quant_method": "compressed-tensors", "sparsity_config": {"format": "sparse-bitmask",
          "sparsity_structure": "unstructured", "targets": ["Linear"]}})",
       "sparsity_config: unsupported format 'sparse-bitmask'"},
      {R"({"quant_method": "compressed-tensors", "sparsity_config": {"format": "marlin-24",
          "sparsity_structure": "2:4", "targets": ["Linear"]}})",
       "sparsity_config: unsupported format 'marlin-24'"},
      {R"({"quant_method": "compressed-tensors", "sparsity_config": {"format": "sparse-24-bitmask",
          "sparsity_structure": "unstructured", "targets": ["Linear"]}})",
       "sparsity_config sparsity_structure: unsupported 'unstructured'"},
      {R"({"quant_method": "compressed-tensors", "sparsity_config": {"format": "sparse-24-bitmask",
          "targets": ["Linear"]}})",
       "sparsity_structure"},
  };
  for (const auto& [json, expect] : cases) {
    auto c = ParseCompressedTensorsConfig(json, "qcfg.json");
    ASSERT_FALSE(c.ok()) << expect;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(expect));
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("qcfg.json"));
  }
}

// llm-compressor's FP8 scheme (FP8 per-tensor weights, static per-tensor FP8 activations) as published
// configs carry it, with every key and with only the non-default ones.
TEST(CompressedTensorsTest, RealFp8StaticActivationConfigsResolve) {
  const std::string dir = kConfigs + "/compressed-tensors/TinyLlama-1.1B-Chat-v1.0-fp8/";
  for (const char* f : {"fp8-config.json", "fp8-default-config.json"}) {
    auto cfg = ParseModelConfig(ReadFile(dir + f), f);
    ASSERT_TRUE(cfg.ok()) << cfg.status();
    auto c = ParseCompressedTensorsConfig(cfg->quantization_config_json, f);
    ASSERT_TRUE(c.ok()) << c.status();
    const ModuleScheme s = Resolve(*c, "model.layers.3.mlp.down_proj");
    EXPECT_EQ(s.format, WeightFormat::kFloatQuantized) << f;
    EXPECT_EQ(s.strategy, QuantStrategy::kTensor) << f;
    EXPECT_TRUE(s.static_input_fp8) << f;
    EXPECT_FALSE(s.static_input_int8 || s.w8a8_dynamic_fp8 || s.w8a8_dynamic_int8) << f;
    EXPECT_FALSE(Resolve(*c, "lm_head").quantized) << f;
  }
  auto kv = ParseModelConfig(ReadFile(dir + "fp8-default-kv_config.json"), "kv");
  ASSERT_TRUE(kv.ok()) << kv.status();
  // Its kv_cache_scheme (FP8 per tensor, static and symmetric by default) is the FP8 KV cache.
  auto c = ParseCompressedTensorsConfig(kv->quantization_config_json, "kv");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->kv_cache_fp8);
  EXPECT_TRUE(Resolve(*c, "model.layers.3.mlp.down_proj").static_input_fp8);
}

// Only static per-tensor symmetric FP8 KV caches are implemented; every other kv_cache_scheme is refused
// naming the field and what it asked for. A null one (what llm-compressor writes without one) is none.
TEST(CompressedTensorsTest, KvCacheSchemesOtherThanStaticFp8AreRefused) {
  const std::string head =
      R"({"quant_method": "compressed-tensors", "format": "dense", "config_groups": {}, "kv_cache_scheme": )";
  auto none = ParseCompressedTensorsConfig(head + "null}", "c");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->kv_cache_fp8);
  for (const char* scheme : {R"({"num_bits": 8, "type": "int", "strategy": "tensor"})",
                             R"({"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": true})",
                             R"({"num_bits": 8, "type": "float", "strategy": "channel"})",
                             R"({"num_bits": 4, "type": "float", "strategy": "tensor"})"}) {
    auto c = ParseCompressedTensorsConfig(head + scheme + "}", "config.json");
    ASSERT_FALSE(c.ok()) << scheme;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("kv_cache_scheme")) << scheme;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("only static per-tensor symmetric FP8"))
        << scheme;
  }
}

TEST(CompressedTensorsTest, UnsupportedFeaturesFailNamingThem) {
  struct Case {
    const char* name;
    const char* json;
    const char* expect;
  };
  const Case cases[] = {
      {"method", R"({"quant_method": "gptq", "bits": 4})", "gptq"},
      {"format", R"({"quant_method": "compressed-tensors", "format": "marlin-24",
         "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4}}}})",
       "marlin-24"},
      {"int4_acts", R"({"quant_method": "compressed-tensors", "format": "int-quantized",
         "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int"},
         "input_activations": {"num_bits": 4, "type": "int", "dynamic": true, "strategy": "token"}}}})",
       "input_activations (type int, 4 bits"},
      {"static_fp8_token", R"({"quant_method": "compressed-tensors", "format": "float-quantized",
         "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float"},
         "input_activations": {"num_bits": 8, "type": "float", "dynamic": false, "strategy": "token"}}}})",
       "static input_activations (type float, 8 bits, strategy token"},
      {"static_fp8_int8_weights", R"({"quant_method": "compressed-tensors", "format": "int-quantized",
         "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int"},
         "input_activations": {"num_bits": 8, "type": "float", "dynamic": false, "strategy": "tensor"}}}})",
       "static input_activations (type float, 8 bits, strategy tensor, dynamic false) with int-quantized"},
      {"output_acts", R"({"quant_method": "compressed-tensors", "format": "float-quantized",
         "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float"},
         "output_activations": {"num_bits": 8, "type": "float"}}}})",
       "output activation"},
      {"fp4_group32", R"({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
         "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float",
         "strategy": "group", "group_size": 32}}}})",
       "nvfp4-pack-quantized weights"},
      {"pack_float", R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
         "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float"}}}})",
       "pack-quantized weights of type float"},
      {"status", R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
         "quantization_status": "frozen", "config_groups": {}})",
       "frozen"},
      {"regex", R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
         "config_groups": {"g": {"targets": ["re:(unclosed"], "weights": {"num_bits": 4, "strategy": "channel"}}}})",
       "re:(unclosed"},
      {"mixed_without_group_format", R"({"quant_method": "compressed-tensors", "format": "mixed-precision",
         "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4, "strategy": "channel"}}}})",
       "per-group 'format'"},
      {"group_without_size", R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
         "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4, "strategy": "group"}}}})",
       "group_size"},
      {"dynamic_weights", R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
         "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4, "strategy": "channel",
         "dynamic": true}}}})",
       "dynamic weight"},
      {"transform", R"({"quant_method": "compressed-tensors", "format": "dense",
         "transform_config": {"config_groups": {"r": {"type": "random-matrix", "apply": []}}}})",
       "transform_config group 'r': unsupported type 'random-matrix'"},
      {"malformed", R"({"quant_method": )", "malformed"},
  };
  for (const Case& tc : cases) {
    auto c = ParseCompressedTensorsConfig(tc.json, "qcfg.json");
    ASSERT_FALSE(c.ok()) << tc.name;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << tc.name;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(tc.expect)) << tc.name;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("qcfg.json")) << tc.name;
  }
}

}  // namespace
}  // namespace scored

namespace scored {
namespace {

// transform_config as llm-compressor's QuIPModifier writes it
// (tests/fixtures/stories260k-quip-w4a16-channel): one random-Hadamard scheme "v", online on every Linear's
// input but lm_head, its inverse fused into the weights.
constexpr char kQuipConfig[] =
    R"({"quant_method": "compressed-tensors", "format": "dense", "config_groups": {},
  "transform_config": {"config_groups": {"v": {"apply": [
    {"ignore": ["lm_head"], "inverse": false, "location": "input", "targets": ["Linear"]},
    {"ignore": ["lm_head"], "inverse": true, "location": "weight_input", "targets": ["Linear"]}],
  "head_dim": null, "precision": "torch.float64", "randomize": false, "requires_grad": false,
  "type": "random-hadamard"}}}})";

TEST(TransformConfigTest, QuipInputRotationResolvesPerModule) {
  auto c = ParseCompressedTensorsConfig(kQuipConfig, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->transforms.schemes.size(), 1u);
  auto q = ResolveTransforms(c->transforms, "model.layers.0.self_attn.q_proj");
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_EQ(q->size(), 1u);  // the offline weight_input entry needs nothing at inference
  EXPECT_EQ((*q)[0].location, "input");
  EXPECT_FALSE((*q)[0].inverse);
  EXPECT_EQ((*q)[0].head_dim, 0);
  EXPECT_EQ((*q)[0].TensorSuffix(), ".v_input.weight");
  auto head = ResolveTransforms(c->transforms, "lm_head");
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_TRUE(head->empty());
}

TEST(TransformConfigTest, WhatIsNotImplementedIsRefusedNamingIt) {
  struct Case {
    const char* scheme;
    const char* expect;
  };
  for (const Case& c : {
           Case{R"({"type": "random-matrix", "apply": []})", "type 'random-matrix'"},
           Case{R"({"type": "hadamard", "randomize": true, "apply": []})", "randomize"},
           Case{R"({"type": "hadamard", "apply": [{"targets": ["re:.*q_proj"], "location": "q_attn"}]})",
                "q_attn"},
           Case{R"({"type": "hadamard", "apply": [{"targets": ["re:("], "location": "input"}]})",
                "not a valid regex"},
       }) {
    const std::string json =
        std::string(R"({"quant_method": "compressed-tensors", "format": "dense", "config_groups": {},
      "transform_config": {"config_groups": {"r": )") +
        c.scheme + "}}}";
    auto parsed = ParseCompressedTensorsConfig(json, "config.json");
    ASSERT_FALSE(parsed.ok()) << c.scheme;
    EXPECT_THAT(std::string(parsed.status().message()), ::testing::HasSubstr(c.expect)) << c.scheme;
  }
}

}  // namespace
}  // namespace scored
